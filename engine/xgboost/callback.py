"""ReportCallback: one ``engine.report()`` per boosting round, checkpoints included.

Importing this module imports xgboost (the callback subclasses its ``TrainingCallback``);
``engine.xgboost`` imports it only when ``ReportCallback`` is first used.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Union

from xgboost.callback import TrainingCallback

from engine._internal.gbdt import checkpoint_due, is_rank_zero, metric_key, select_metrics
from engine.xgboost.checkpoint import MODEL_FILE, XGBoostCheckpoint, load_booster


class ReportCallback(TrainingCallback):
    """Reports every round's eval metrics (``<eval set>-<metric>``, e.g.
    ``validation-logloss``) and saves the model every ``frequency`` rounds and at the end.

    Each boosting round is one report (one ``training_iteration``); the round that ends
    training carries the final checkpoint, so a round's metrics are sent when the next
    round ends (or training does). Rank 0 saves the model; every rank reports.

    Args:
        metrics: Which metrics to report: None (all), a name, a list of names, or a dict
            ``{name to report: XGBoost's name}``.
        filename: The model file in the checkpoint.
        frequency: Save a checkpoint every this many rounds (0: only at the end).
        checkpoint_at_end: Save one when training ends.
        results_postprocessing_fn: ``f(metrics) -> metrics`` applied before reporting.
        extra_metrics: Constant values added to every report.
    """

    def __init__(self, metrics: Optional[Union[str, List[str], Dict[str, str]]] = None,
                 filename: str = MODEL_FILE, frequency: int = 0,
                 checkpoint_at_end: bool = True,
                 results_postprocessing_fn: Optional[Callable[[Dict[str, Any]],
                                                              Dict[str, Any]]] = None,
                 extra_metrics: Optional[Dict[str, Any]] = None) -> None:
        super().__init__()
        if not isinstance(frequency, int) or frequency < 0:
            raise ValueError(f"ReportCallback(frequency={frequency!r}) must be an integer "
                             ">= 0 (0: checkpoint only at the end).")
        self._metrics = metrics
        self._filename = filename
        self._frequency = frequency
        self._checkpoint_at_end = checkpoint_at_end
        self._postprocess = results_postprocessing_fn
        self._extra = dict(extra_metrics or {})
        self._pending: Optional[Dict[str, Any]] = None

    @classmethod
    def get_model(cls, checkpoint: Any, filename: str = MODEL_FILE) -> Any:
        """The ``xgboost.Booster`` a checkpoint of this callback holds."""
        return load_booster(checkpoint, filename)

    def after_iteration(self, model: Any, epoch: int, evals_log: Dict[str, Any]) -> bool:
        metrics = self._round_metrics(evals_log)
        self._flush()
        if checkpoint_due(epoch, self._frequency):
            self._report(metrics, model)
        else:
            self._pending = metrics
        return False

    def after_training(self, model: Any) -> Any:
        if self._pending is not None:
            self._report(self._pending, model if self._checkpoint_at_end else None)
            self._pending = None
        return model

    # --- helpers ----------------------------------------------------------------------
    def _round_metrics(self, evals_log: Dict[str, Any]) -> Dict[str, Any]:
        flat = {metric_key(data, name): _last(values)
                for data, by_metric in evals_log.items()
                for name, values in by_metric.items()}
        out = select_metrics(flat, self._metrics)
        if self._postprocess is not None:
            out = self._postprocess(out)
        return {**out, **self._extra}

    def _flush(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._report(pending, None)

    def _report(self, metrics: Dict[str, Any], model: Any) -> None:
        from engine.session import report

        checkpoint = None
        if model is not None and is_rank_zero():
            checkpoint = XGBoostCheckpoint.from_model(model, filename=self._filename)
        report(metrics, checkpoint=checkpoint)


def _last(values: Any) -> Any:
    value = values[-1] if isinstance(values, (list, tuple)) else values
    if isinstance(value, (list, tuple)):  # xgboost.cv: (mean, std)
        value = value[0]
    return float(value)
