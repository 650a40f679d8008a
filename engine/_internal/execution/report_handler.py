"""What happens to one complete round of reports, in one place.

The controller pairs the ranks' reports into rounds and hands each to a
``ReportHandler``, which passes it to its report callbacks in order (as Ray Train V2's
``ReportCallbackHandler`` does): the run record takes the round's row, the checkpoint
committer commits the round's checkpoint (saving the record with it), and the user's
callbacks see both. The controller itself never writes to storage for a round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence

from engine._internal.worker_group.metrics import reduce_metrics
from engine._internal.worker_group.session import ReportItem
from engine.checkpoint import Checkpoint


@dataclass
class Round:
    """Every rank's report of one iteration, and what the driver made of them."""

    iteration: int
    items: Dict[int, ReportItem]        # by rank
    metrics: Dict[str, Any]             # rank 0's, with reductions and driver fields
    all_metrics: List[Dict[str, Any]]   # every rank's, by rank
    checkpoint: Optional[Checkpoint] = None  # set once committed

    @classmethod
    def of(cls, iteration: int, items: Dict[int, ReportItem],
           metrics_reduce: Optional[Mapping[str, str]], driver_fields: Dict[str, Any]
           ) -> "Round":
        """The round of ``items``: rank 0's metrics, ``RunConfig(metrics_reduce)``'s
        reductions over all ranks, then the fields the driver adds (ids, config)."""
        all_metrics = [items[r].metrics for r in sorted(items)]
        metrics = dict(items[min(items)].metrics)
        metrics.update(reduce_metrics(all_metrics, metrics_reduce))
        metrics.update(driver_fields)
        return cls(iteration, items, metrics, all_metrics)

    @property
    def staged(self) -> bool:
        """Whether any rank staged checkpoint files with this report."""
        return any(item.checkpoint_staging for item in self.items.values())


class ReportCallback(Protocol):
    def after_report(self, rnd: Round) -> None:
        """Called once per complete round, in the handler's order."""


class UserCallbacks:
    """The user's callbacks (``RunConfig(callbacks)``, the default loggers) as a report
    callback: ``on_report``, then ``on_checkpoint`` when the round committed one."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner

    def after_report(self, rnd: Round) -> None:
        self.runner.report(rnd.metrics, rnd.all_metrics, rnd.checkpoint)


class ReportHandler:
    """Passes each round to ``report_callbacks`` in order; a callback may rely on the
    ones before it (the committer saves the row the record took)."""

    def __init__(self, report_callbacks: Sequence[ReportCallback]) -> None:
        self.report_callbacks = list(report_callbacks)

    def handle(self, rnd: Round) -> None:
        for callback in self.report_callbacks:
            callback.after_report(rnd)
