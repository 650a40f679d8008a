"""``ExperimentAnalysis``: what the legacy ``tune.run()`` returns (Ray Tune's
``ray.tune.ExperimentAnalysis``), a view over the run's :class:`ResultGrid`.

A "trial" here is that trial's :class:`engine.Result` (``config``, ``metrics``, ``path``,
``checkpoint``, ``best_checkpoints``).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Union

from engine.checkpoint import Checkpoint
from engine.exceptions import TrainingFailedError
from engine.result import Result
from engine.tune.result_grid import ResultGrid

__all__ = ["ExperimentAnalysis", "TuneError"]


class TuneError(TrainingFailedError):
    """Raised by ``tune.run()`` when trials failed (``raise_on_failed_trial=True``)."""


class ExperimentAnalysis:
    """The trials of a ``tune.run()``.

    Args:
        result_grid: The Tuner's results.
        default_metric, default_mode: ``tune.run(metric=, mode=)``; used by the
            ``best_*`` properties and as defaults of the ``get_best_*`` methods.
    """

    def __init__(self, result_grid: ResultGrid, default_metric: Optional[str] = None,
                 default_mode: Optional[str] = None) -> None:
        self.result_grid = result_grid
        self.default_metric = default_metric
        self.default_mode = default_mode

    # --- all trials ---------------------------------------------------------------
    @property
    def trials(self) -> List[Result]:
        return list(self.result_grid)

    @property
    def experiment_path(self) -> str:
        return self.result_grid.experiment_path

    @property
    def results(self) -> Dict[str, Dict[str, Any]]:
        """Each trial's last result, by trial id."""
        return {_trial_id(r): r.metrics for r in self.result_grid}

    @property
    def results_df(self):
        return self.result_grid.get_dataframe()

    def dataframe(self, metric: Optional[str] = None, mode: Optional[str] = None):
        """One row per trial: its last result, or with ``metric`` and ``mode`` its best."""
        return self.result_grid.get_dataframe(filter_metric=metric, filter_mode=mode)

    @property
    def trial_dataframes(self) -> Dict[str, Any]:
        """Every result of each trial, by trial path."""
        return {r.path: r.metrics_dataframe for r in self.result_grid}

    def get_all_configs(self) -> Dict[str, Dict[str, Any]]:
        return {r.path: r.config for r in self.result_grid}

    # --- the best trial -----------------------------------------------------------------
    def get_best_trial(self, metric: Optional[str] = None, mode: Optional[str] = None,
                       scope: str = "last", filter_nan_and_inf: bool = True
                       ) -> Optional[Result]:
        """The best trial by ``metric`` (``scope`` as in ``ResultGrid.get_best_result``);
        None when no trial reported it."""
        metric, mode = self._metric_mode(metric, mode, "get_best_trial")
        try:
            return self.result_grid.get_best_result(metric, mode, scope, filter_nan_and_inf)
        except RuntimeError:
            return None

    def get_best_config(self, metric: Optional[str] = None, mode: Optional[str] = None,
                        scope: str = "last") -> Optional[Dict[str, Any]]:
        best = self.get_best_trial(metric, mode, scope)
        return best.config if best is not None else None

    def get_best_checkpoint(self, trial: Union[Result, str], metric: Optional[str] = None,
                            mode: Optional[str] = None) -> Optional[Checkpoint]:
        """The kept checkpoint of ``trial`` (a Result or its path) with the best
        ``metric``; None when it kept none that reported the metric."""
        metric, mode = self._metric_mode(metric, mode, "get_best_checkpoint")
        result = self._find(trial)
        scored = [(c, m[metric]) for c, m in result.best_checkpoints
                  if isinstance(m.get(metric), (int, float)) and math.isfinite(m[metric])]
        if not scored:
            return None
        pick = max if mode == "max" else min
        return pick(scored, key=lambda cm: cm[1])[0]

    @property
    def best_trial(self) -> Optional[Result]:
        return self.get_best_trial(*self._defaults("best_trial"))

    @property
    def best_config(self) -> Optional[Dict[str, Any]]:
        return self.get_best_config(*self._defaults("best_config"))

    @property
    def best_result(self) -> Optional[Dict[str, Any]]:
        best = self.get_best_trial(*self._defaults("best_result"))
        return best.metrics if best is not None else None

    @property
    def best_checkpoint(self) -> Optional[Checkpoint]:
        metric, mode = self._defaults("best_checkpoint")
        best = self.get_best_trial(metric, mode)
        return self.get_best_checkpoint(best, metric, mode) if best is not None else None

    @property
    def best_path(self) -> Optional[str]:
        best = self.get_best_trial(*self._defaults("best_path"))
        return best.path if best is not None else None

    best_logdir = best_path

    @property
    def best_dataframe(self):
        best = self.get_best_trial(*self._defaults("best_dataframe"))
        return best.metrics_dataframe if best is not None else None

    # --- helpers -------------------------------------------------------------------------
    def _defaults(self, name: str) -> tuple:
        if not self.default_metric or not self.default_mode:
            raise ValueError(
                f"To fetch `{name}`, pass `metric` and `mode` to tune.run(), or use the "
                "get_best_* methods with metric and mode (e.g. "
                "analysis.get_best_config(metric='loss', mode='min')).")
        return self.default_metric, self.default_mode

    def _metric_mode(self, metric: Optional[str], mode: Optional[str], name: str) -> tuple:
        metric, mode = metric or self.default_metric, mode or self.default_mode
        if not metric or mode not in ("min", "max"):
            raise ValueError(f"{name}() needs a metric and mode='min'|'max' (pass them, or "
                             "tune.run(metric=..., mode=...)).")
        return metric, mode

    def _find(self, trial: Union[Result, str]) -> Result:
        if isinstance(trial, Result):
            return trial
        for result in self.result_grid:
            if result.path == str(trial) or _trial_id(result) == str(trial):
                return result
        raise ValueError(f"No trial at {trial!r} in this experiment: pass one of "
                         "analysis.trials (or its path).")

    def __repr__(self) -> str:
        return f"ExperimentAnalysis({len(self.result_grid)} trials, {self.experiment_path!r})"


def _trial_id(result: Result) -> str:
    return str(result.metrics.get("trial_id", result.path))
