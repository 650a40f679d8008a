"""Where a run's wall time goes: named wall-clock marks, kept in the run record.

The driver marks the steps of ``fit()`` (Ray's start, the workers' start, the
collective's set-up, training started and ended, teardown); rank 0 marks its own steps
(reading its shard, building the matrices, the framework's training call). At the end
of an attempt the driver fetches rank 0's marks, and the run record keeps both lists
under ``"timeline"`` (``{"driver": [[name, unix time], ...], "rank0": [...]}``), so a
benchmark or a user can see where a step's seconds went without a profiler. Marks are
a few list appends per run; nothing is measured per round.
"""

from __future__ import annotations

import threading
import time
from typing import List, Tuple

Mark = Tuple[str, float]

_marks: List[Mark] = []
_lock = threading.Lock()


def mark(name: str) -> None:
    """Record that step ``name`` ended (or began) now, in this process."""
    with _lock:
        _marks.append((name, time.time()))


def marks() -> List[Mark]:
    """This process's marks so far, oldest first."""
    with _lock:
        return list(_marks)


def take() -> List[Mark]:
    """This process's marks, which are then forgotten (a reused worker — a Tuner's —
    starts its next trial with none)."""
    with _lock:
        out = list(_marks)
        _marks.clear()
        return out
