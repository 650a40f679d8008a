"""ReportCallback for ``lightgbm.train``: one ``engine.report()`` per boosting round."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from engine._internal.gbdt.callback import BoosterReportCallback, checkpoint_due, metric_key
from engine.lightgbm.checkpoint import LightGBMCheckpoint


class ReportCallback(BoosterReportCallback):
    """Reports every round's eval metrics (``<eval set>-<metric>``, e.g.
    ``validation-binary_logloss``) and saves the model every ``frequency`` rounds and at
    the last scheduled round. Rank 0 saves the model; every rank reports.
    ``ReportCallback.get_model(checkpoint)`` is the ``lightgbm.Booster`` it saved.

    Early stopping ends training before the scheduled last round: call
    ``finish(booster)`` after ``lgb.train`` to report the final model in one more
    report (the built-in ``LightGBMTrainer`` loop does).

    LightGBM computes metrics per worker: ``train-*`` metrics are the reporting
    worker's own shard (``RunConfig(metrics_reduce={"train-binary_logloss": "mean"})``
    averages them over workers); eval sets given whole to every worker are the whole set.

    Args:
        metrics: Which metrics to report: None (all), a name, a list of names, or a dict
            ``{name to report: "<eval set>-<metric>"}``.
        filename: The model file in the checkpoint (default ``model.txt``).
        frequency: Save a checkpoint every this many rounds (0: only at the end).
        checkpoint_at_end: Save one at the last round.
        results_postprocessing_fn: ``f(metrics) -> metrics`` applied before reporting.
        extra_metrics: Constant values added to every report.
    """

    checkpoint_cls = LightGBMCheckpoint
    before_iteration = False

    def _init_state(self) -> None:
        self._last: Optional[Dict[str, Any]] = None   # the last round's metrics
        self._last_had_checkpoint = False
        # lgb.train runs callbacks by `order` and gives an instance without one its own;
        # 20: before early stopping (30), so the round that stops training is reported.
        self.order = 20

    def __call__(self, env: Any) -> None:
        metrics = self._round_metrics(_flat(env.evaluation_result_list or []))
        last_round = env.iteration == env.end_iteration - 1
        save = checkpoint_due(env.iteration, self._frequency) or (
            last_round and self._checkpoint_at_end)
        self._report(metrics, env.model if save else None)

    def finish(self, booster: Any) -> None:
        """After ``lgb.train``: report the final model when training stopped early and
        its last round carried no checkpoint (a no-op otherwise)."""
        if self._last is None or self._last_had_checkpoint or not self._checkpoint_at_end:
            return
        self._report(dict(self._last), booster)

    def _report(self, metrics: Dict[str, Any], model: Any) -> None:
        super()._report(metrics, model)
        self._last = metrics
        self._last_had_checkpoint = model is not None


def _flat(results: List[Any]) -> Dict[str, Any]:
    """``{"<eval set>-<metric>": value}`` from LightGBM's ``(set, metric, value, …)``."""
    return {metric_key(item[0], item[1]): float(item[2]) for item in results}
