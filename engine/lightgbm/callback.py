"""ReportCallback for ``lightgbm.train``: one ``engine.report()`` per boosting round."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Union

from engine._internal.gbdt import checkpoint_due, is_rank_zero, metric_key, select_metrics
from engine.lightgbm.checkpoint import MODEL_FILE, LightGBMCheckpoint, load_booster


class ReportCallback:
    """Reports every round's eval metrics (``<eval set>-<metric>``, e.g.
    ``validation-binary_logloss``) and saves the model every ``frequency`` rounds and at
    the last scheduled round. Rank 0 saves the model; every rank reports.

    Early stopping ends training before the scheduled last round: call
    ``finish(booster)`` after ``lgb.train`` to report the final model in one more
    report (the built-in ``LightGBMTrainer`` loop does).

    LightGBM computes metrics per worker: ``train-*`` metrics are the reporting
    worker's own shard (``RunConfig(metrics_reduce={"train-binary_logloss": "mean"})``
    averages them over workers); eval sets given whole to every worker are the whole set.

    Args:
        metrics: Which metrics to report: None (all), a name, a list of names, or a dict
            ``{name to report: "<eval set>-<metric>"}``.
        filename: The model file in the checkpoint.
        frequency: Save a checkpoint every this many rounds (0: only at the end).
        checkpoint_at_end: Save one at the last round.
        results_postprocessing_fn: ``f(metrics) -> metrics`` applied before reporting.
        extra_metrics: Constant values added to every report.
    """

    before_iteration = False

    def __init__(self, metrics: Optional[Union[str, List[str], Dict[str, str]]] = None,
                 filename: str = MODEL_FILE, frequency: int = 0,
                 checkpoint_at_end: bool = True,
                 results_postprocessing_fn: Optional[Callable[[Dict[str, Any]],
                                                              Dict[str, Any]]] = None,
                 extra_metrics: Optional[Dict[str, Any]] = None) -> None:
        if not isinstance(frequency, int) or frequency < 0:
            raise ValueError(f"ReportCallback(frequency={frequency!r}) must be an integer "
                             ">= 0 (0: checkpoint only at the end).")
        self._metrics = metrics
        self._filename = filename
        self._frequency = frequency
        self._checkpoint_at_end = checkpoint_at_end
        self._postprocess = results_postprocessing_fn
        self._extra = dict(extra_metrics or {})
        self._last: Optional[Dict[str, Any]] = None   # the last round's metrics
        self._last_had_checkpoint = False
        # lgb.train runs callbacks by `order` and gives an instance without one its own;
        # 20: before early stopping (30), so the round that stops training is reported.
        self.order = 20

    @classmethod
    def get_model(cls, checkpoint: Any, filename: str = MODEL_FILE) -> Any:
        """The ``lightgbm.Booster`` a checkpoint of this callback holds."""
        return load_booster(checkpoint, filename)

    def __call__(self, env: Any) -> None:
        metrics = self._round_metrics(env.evaluation_result_list or [])
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

    # --- helpers ----------------------------------------------------------------------
    def _round_metrics(self, results: List[Any]) -> Dict[str, Any]:
        flat = {metric_key(item[0], item[1]): float(item[2]) for item in results}
        out = select_metrics(flat, self._metrics)
        if self._postprocess is not None:
            out = self._postprocess(out)
        return {**out, **self._extra}

    def _report(self, metrics: Dict[str, Any], model: Any) -> None:
        from engine.session import report

        checkpoint = None
        if model is not None and is_rank_zero():
            checkpoint = LightGBMCheckpoint.from_model(model, filename=self._filename)
        report(metrics, checkpoint=checkpoint)
        self._last = metrics
        self._last_had_checkpoint = model is not None
