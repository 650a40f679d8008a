"""Pairing the k-th report of every rank into rounds, and catching uneven reporting."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from engine._internal.worker_group.session import ReportItem


class RoundTracker:
    """Collects reports per rank and releases each round once all ranks reached it."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.pending: Dict[int, Dict[int, ReportItem]] = {}
        self.last_iteration: Dict[int, int] = {}
        self.reports: Dict[int, int] = {r: 0 for r in range(world_size)}
        self.finished: Dict[int, bool] = {r: False for r in range(world_size)}

    def add(self, rank: int, item: ReportItem) -> None:
        self.pending.setdefault(item.iteration, {})[rank] = item
        self.reports[rank] += 1

    def pop_complete(self) -> List[Tuple[int, Dict[int, ReportItem]]]:
        """Rounds every rank has reported, oldest first."""
        done = []
        for iteration in sorted(self.pending):
            if len(self.pending[iteration]) < self.world_size:
                break
            done.append((iteration, self.pending.pop(iteration)))
        return done

    def finish(self, rank: int) -> None:
        self.finished[rank] = True

    @property
    def all_finished(self) -> bool:
        return all(self.finished.values())

    def mismatch(self) -> Optional[str]:
        """A message when some rank finished with fewer reports than another made."""
        done = [r for r, f in self.finished.items() if f]
        if not done:
            return None
        most = max(self.reports.values())
        if any(self.reports[r] < most for r in done) or (
            self.all_finished and len(set(self.reports.values())) > 1
        ):
            counts = ", ".join(f"rank {r}: {n}" for r, n in sorted(self.reports.items()))
            return (
                "Workers called report() a different number of times "
                f"({counts}) and at least one has finished. Every worker must call "
                "report() the same number of times: call it on every rank (metrics from "
                "rank 0 are used), not only inside `if rank == 0:`."
            )
        return None
