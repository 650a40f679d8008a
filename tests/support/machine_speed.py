"""How fast this machine's CPU is right now, so that test-run times can be compared.

On the 2-core development VM the suite is CPU-bound, and the VM's speed per CPU-second
moved more than any change to the tests did: the XGBoost benchmark's anchor (an
unchanged script) took 3.7-4.7 s on 2026-11-26, 6.8 s on 2026-11-28 and 10.1 s on
2026-11-29, each on a quiet machine, while the guest's steal time stayed at about 1 % or less.
A run's wall time says little without the speed it ran at: the suite's terminal
summary prints :func:`reference_ms` at the start and the end of the run.

    python -m tests.support.machine_speed
"""

from __future__ import annotations

import time
import os
from typing import Optional, Tuple

_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _workload() -> int:
    """Fixed pure-Python work of the kinds the suite's CPU goes to (module bodies,
    dicts, strings, small objects): about 0.1 s of CPU on a fast core."""
    total = 0
    table = {}
    for i in range(60_000):
        key = f"k{i % 977}"
        table[key] = table.get(key, 0) + i
        total += len(key) + (i * 7) % 13
    words = [str(i) for i in range(40_000)]
    total += len(" ".join(sorted(words)))
    return total + sum(table.values())


def reference_ms(repeats: int = 5) -> float:
    """CPU milliseconds of the fixed workload, the best of ``repeats`` (lower is faster).

    CPU time, not wall time: other processes on the machine do not lengthen it unless
    they slow the core itself (a slower host, a contended cache), which is what it is
    for."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        _workload()
        best = min(best, time.process_time() - start)
    return best * 1000.0


def cpu_times() -> Optional[Tuple[int, int, int]]:
    """(all, steal, busy) jiffies of the machine from ``/proc/stat``; None where it is
    not. Busy is all but idle and iowait, as ``scripts/cpu_by_process.py`` counts it."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    steal = fields[7] if len(fields) > 7 else 0
    busy = sum(fields[i] for i in (0, 1, 2, 5, 6, 7) if i < len(fields))
    return sum(fields[:8]), steal, busy


def busy_seconds(before: Optional[Tuple[int, int]],
                 after: Optional[Tuple[int, int]]) -> Optional[float]:
    """CPU-seconds the machine was busy between two :func:`cpu_times` readings: every
    process on it and the kernel, not only the suite's."""
    if before is None or after is None or len(before) < 3 or len(after) < 3:
        return None
    return (after[2] - before[2]) / _HZ


def steal_share(before: Optional[Tuple[int, int]],
                after: Optional[Tuple[int, int]]) -> Optional[float]:
    """The share of the machine's CPU time the hypervisor took between two readings."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


if __name__ == "__main__":
    print(f"reference loop: {reference_ms():.0f} ms of CPU (lower is faster)")
