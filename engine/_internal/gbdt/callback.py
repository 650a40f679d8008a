"""The per-round reporting rules both tree frameworks follow, and the part of their
``ReportCallback`` that does not depend on how the framework calls it back."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Union

Metrics = Dict[str, Any]
WantedMetrics = Optional[Union[str, List[str], Dict[str, str]]]


def metric_key(dataset: str, metric: str) -> str:
    """``validation-logloss``: eval set name, dash, metric name (as Ray and XGBoost)."""
    return f"{dataset}-{metric}"


def checkpoint_due(round_index: int, frequency: int) -> bool:
    """Whether 0-based boosting round ``round_index`` ends a ``frequency`` interval."""
    return frequency > 0 and (round_index + 1) % frequency == 0


def select_metrics(metrics: Metrics, wanted: Any) -> Metrics:
    """Keep the metrics a report callback was asked for: None (all), a name, a list of
    names, or a dict ``{reported name: framework metric name}``."""
    if wanted is None:
        return metrics
    if isinstance(wanted, str):
        wanted = [wanted]
    pairs = wanted.items() if isinstance(wanted, dict) else [(w, w) for w in wanted]
    out = {}
    for reported, source in pairs:
        if source not in metrics:
            raise KeyError(f"Metric {source!r} is not among this round's metrics "
                           f"{sorted(metrics)}: fix the callback's metrics=...")
        out[reported] = metrics[source]
    return out


def is_rank_zero() -> bool:
    from engine._internal.worker_group.session import get_session

    session = get_session()
    return session is None or session.context.world_rank == 0


class BoosterReportCallback:
    """Base of ``engine.xgboost.ReportCallback`` and ``engine.lightgbm.ReportCallback``:
    the arguments, turning a round's ``<eval set>-<metric>`` values into a report, and
    the report itself (rank 0 saves the model; every rank reports).

    A subclass sets ``checkpoint_cls`` (its ``BoosterCheckpoint``) and hooks into the
    framework's callback protocol; :meth:`_init_state` sets up its own state.

    Args:
        metrics: Which metrics to report: None (all), a name, a list of names, or a dict
            ``{name to report: framework metric name}``.
        filename: The model file in the checkpoint (default the checkpoint class's
            ``MODEL_FILENAME``).
        frequency: Save a checkpoint every this many rounds (0: only at the end).
        checkpoint_at_end: Save one when training ends.
        results_postprocessing_fn: ``f(metrics) -> metrics`` applied before reporting.
        extra_metrics: Constant values added to every report.

    Raises:
        ValueError: ``frequency`` is not an integer >= 0.
    """

    checkpoint_cls: Any = None

    def __init__(self, metrics: WantedMetrics = None, filename: Optional[str] = None,
                 frequency: int = 0, checkpoint_at_end: bool = True,
                 results_postprocessing_fn: Optional[Callable[[Metrics], Metrics]] = None,
                 extra_metrics: Optional[Metrics] = None) -> None:
        super().__init__()  # the framework's callback base, if any
        if not isinstance(frequency, int) or frequency < 0:
            raise ValueError(f"ReportCallback(frequency={frequency!r}) must be an integer "
                             ">= 0 (0: checkpoint only at the end).")
        self._metrics = metrics
        self._filename = filename or self.checkpoint_cls.MODEL_FILENAME
        self._frequency = frequency
        self._checkpoint_at_end = checkpoint_at_end
        self._postprocess = results_postprocessing_fn
        self._extra = dict(extra_metrics or {})
        self._init_state()

    def _init_state(self) -> None:
        """Set up the framework half's own state (called at the end of ``__init__``)."""

    @classmethod
    def get_model(cls, checkpoint: Any, filename: Optional[str] = None) -> Any:
        """The booster a checkpoint of this callback holds."""
        return cls.checkpoint_cls.load_booster(checkpoint,
                                               filename or cls.checkpoint_cls.MODEL_FILENAME)

    def _round_metrics(self, flat: Metrics) -> Metrics:
        """One round's ``{"<eval set>-<metric>": value}`` as reported: the metrics asked
        for, post-processed, plus the extra ones."""
        out = select_metrics(flat, self._metrics)
        if self._postprocess is not None:
            out = self._postprocess(out)
        return {**out, **self._extra}

    def _report(self, metrics: Metrics, model: Any) -> None:
        """Report ``metrics``; with ``model``, rank 0 saves it as the checkpoint."""
        from engine.session import report

        checkpoint = None
        if model is not None and is_rank_zero():
            checkpoint = self.checkpoint_cls.from_model(model, filename=self._filename)
        report(metrics, checkpoint=checkpoint)
