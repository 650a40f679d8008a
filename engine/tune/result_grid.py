"""ResultGrid: the results of every trial of a Tuner run."""

from __future__ import annotations

import math
from typing import Any, Iterator, List, Optional

from engine.result import Result
from engine.tune.search import leaves, path_name

_SCOPES = ("last", "avg", "last-5-avg", "last-10-avg", "all")


class ResultGrid:
    """One :class:`engine.Result` per trial, in the order the trials were created.

    A failed trial's ``Result.error`` holds its exception (a ``TrainingFailedError``
    with the remote traceback); the other trials' results are complete.
    """

    def __init__(self, results: List[Result], metric: Optional[str] = None,
                 mode: Optional[str] = None, experiment_path: str = "",
                 trial_ids: Optional[List[str]] = None) -> None:
        self._results = list(results)
        self._metric = metric
        self._mode = mode
        self.experiment_path = experiment_path
        self._trial_ids = list(trial_ids or [r.metrics.get("trial_id", "") for r in results])

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, index: int) -> Result:
        return self._results[index]

    def __iter__(self) -> Iterator[Result]:
        return iter(self._results)

    @property
    def errors(self) -> List[BaseException]:
        """The exceptions of the failed trials."""
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    @property
    def num_terminated(self) -> int:
        """Trials that ended without an error (finished or stopped early)."""
        return sum(1 for r in self._results
                   if r.error is None and r.metrics.get("done", False))

    def get_best_result(self, metric: Optional[str] = None, mode: Optional[str] = None,
                        scope: str = "last", filter_nan_and_inf: bool = True) -> Result:
        """The trial with the best ``metric``.

        Args:
            metric, mode: Default to ``TuneConfig(metric, mode)``.
            scope: Which of a trial's results count: ``"last"`` (default), ``"avg"``,
                ``"last-5-avg"``, ``"last-10-avg"``, or ``"all"`` (its best one).
            filter_nan_and_inf: Skip trials whose value is NaN or infinite.

        Raises:
            ValueError: No metric/mode given or configured, or an unknown scope.
            RuntimeError: No trial reported the metric.
        """
        metric, mode = metric or self._metric, mode or self._mode
        if not metric or not mode:
            raise ValueError("get_best_result() needs a metric and a mode: pass them, or set "
                             "TuneConfig(metric=..., mode='min'|'max').")
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}.")
        if scope not in _SCOPES:
            raise ValueError(f"scope must be one of {_SCOPES}, got {scope!r}.")
        best, best_value = None, None
        for result in self._results:
            value = _scoped_value(result, metric, mode, scope)
            if value is None or (filter_nan_and_inf and not math.isfinite(value)):
                continue
            if best_value is None or (value > best_value if mode == "max"
                                      else value < best_value):
                best, best_value = result, value
        if best is None:
            raise RuntimeError(f"No trial reported a usable {metric!r} (NaN and inf are "
                               "skipped unless filter_nan_and_inf=False).")
        return best

    def get_dataframe(self, filter_metric: Optional[str] = None,
                      filter_mode: Optional[str] = None):
        """One row per trial: its last metrics (or, with ``filter_metric`` and
        ``filter_mode``, its best report), ``config/...`` columns and ``path``."""
        import pandas as pd

        from engine.result import _flatten

        rows = []
        for i, result in enumerate(self._results):
            metrics = result.metrics
            if filter_metric and filter_mode and result.history:
                scored = [h for h in result.history
                          if isinstance(h.get(filter_metric), (int, float))]
                if scored:
                    pick = max if filter_mode == "max" else min
                    metrics = pick(scored, key=lambda h: h[filter_metric])
            row = _flatten(dict(metrics))
            for path, value in leaves(result.config or {}):
                if path:
                    row[f"config/{path_name(path)}"] = value
            row["trial_id"] = metrics.get("trial_id") or self._trial_ids[i]
            row["path"] = result.path
            row["error"] = None if result.error is None else type(result.error).__name__
            rows.append(row)
        return pd.DataFrame(rows)

    def plot(self, metrics: Optional[List[str]] = None, path: Optional[str] = None,
             x: str = "training_iteration") -> str:
        """Write a PNG with one learning curve per trial (labelled with the trial's
        directory name), one panel per metric.

        Args:
            metrics: Columns of the trials' ``metrics_dataframe``; None plots every
                numeric metric that is not an automatic field.
            path: Where to write it (local path or URI); defaults to
                ``learning_curves.png`` in the experiment directory.
            x: The x axis column.

        Returns:
            The path (or URI) written.

        Raises:
            ValueError: No trial reported anything, or a metric no trial reported.
        """
        from engine._internal.plotting import plot_results, join_run_path

        reported = [r for r in self._results if r.history]
        if not reported:
            raise ValueError("ResultGrid.plot(): no trial reported any metrics yet.")
        if path is None:
            path = join_run_path(self.experiment_path, "learning_curves.png")
        return plot_results(reported, metrics, path, self.experiment_path, x)

    def __repr__(self) -> str:
        return (f"ResultGrid({len(self)} trials, {self.num_errors} errors, "
                f"path={self.experiment_path!r})")


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _scoped_value(result: Result, metric: str, mode: str, scope: str) -> Optional[float]:
    if scope == "last" or not result.history:
        return _number(result.metrics.get(metric))
    values = [v for v in (_number(h.get(metric)) for h in result.history) if v is not None]
    if not values:
        return None
    if scope == "all":
        return max(values) if mode == "max" else min(values)
    if scope.startswith("last-"):
        values = values[-int(scope.split("-")[1]):]
    return sum(values) / len(values)
