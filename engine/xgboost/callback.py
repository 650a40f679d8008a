"""ReportCallback: one ``engine.report()`` per boosting round, checkpoints included.

Importing this module imports xgboost (the callback subclasses its ``TrainingCallback``);
``engine.xgboost`` imports it only when ``ReportCallback`` is first used.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from xgboost.callback import TrainingCallback

from engine._internal.gbdt.callback import BoosterReportCallback, checkpoint_due, metric_key
from engine.xgboost.checkpoint import XGBoostCheckpoint


class ReportCallback(BoosterReportCallback, TrainingCallback):
    """Reports every round's eval metrics (``<eval set>-<metric>``, e.g.
    ``validation-logloss``) and saves the model every ``frequency`` rounds and at the end.

    Each boosting round is one report (one ``training_iteration``); the round that ends
    training carries the final checkpoint, so a round's metrics are sent when the next
    round ends (or training does). Rank 0 saves the model; every rank reports.
    ``ReportCallback.get_model(checkpoint)`` is the ``xgboost.Booster`` it saved.

    Args:
        metrics: Which metrics to report: None (all), a name, a list of names, or a dict
            ``{name to report: XGBoost's name}``.
        filename: The model file in the checkpoint (default ``model.ubj``).
        frequency: Save a checkpoint every this many rounds (0: only at the end).
        checkpoint_at_end: Save one when training ends.
        results_postprocessing_fn: ``f(metrics) -> metrics`` applied before reporting.
        extra_metrics: Constant values added to every report.
    """

    checkpoint_cls = XGBoostCheckpoint

    def _init_state(self) -> None:
        self._pending: Optional[Dict[str, Any]] = None  # the last round's, not yet sent

    def after_iteration(self, model: Any, epoch: int, evals_log: Dict[str, Any]) -> bool:
        metrics = self._round_metrics({metric_key(data, name): _last(values)
                                       for data, by_metric in evals_log.items()
                                       for name, values in by_metric.items()})
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

    def _flush(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._report(pending, None)


def _last(values: Any) -> Any:
    value = values[-1] if isinstance(values, (list, tuple)) else values
    if isinstance(value, (list, tuple)):  # xgboost.cv: (mean, std)
        value = value[0]
    return float(value)
