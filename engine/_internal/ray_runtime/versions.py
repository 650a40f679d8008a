"""Which Ray versions the engine's uses of Ray's private API were checked against.

Everything in ``ray_runtime`` that touches ``ray._private`` (or a private attribute of a
Ray object) was written against Ray 2.60 and asks :func:`written_for` first. Inside the
checked range the touch goes ahead; outside it, :func:`written_for` warns once per feature,
naming what is skipped, and the caller takes its safe fallback (Ray's own behaviour), so
a Ray upgrade costs a speed-up, never a broken start or exit. When a new Ray has been
checked, widen :data:`CHECKED` (and run ``tests/unit/engine/test_ray_local_start.py``).
"""

from __future__ import annotations

import logging
import re
from typing import Set, Tuple

logger = logging.getLogger(__name__)

#: The Ray versions the private touches were checked against: ``[low, high)``.
CHECKED: Tuple[Tuple[int, ...], Tuple[int, ...]] = ((2, 60, 0), (2, 61, 0))

_warned: Set[str] = set()


def parse(version: str) -> Tuple[int, ...]:
    """``"2.60.1"`` -> ``(2, 60, 1)``; suffixes (``.dev0``, ``rc1``) are ignored."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def ray_version() -> str:
    import ray

    return getattr(ray, "__version__", "0")


def written_for(feature: str) -> bool:
    """Whether the running Ray is one that ``feature`` (a use of Ray's private API) was
    checked against; if not, a warning (once per feature) that it is skipped."""
    version = ray_version()
    low, high = CHECKED
    if low <= parse(version) < high:
        return True
    if feature not in _warned:
        _warned.add(feature)
        logger.warning(
            "trainyard's %s uses Ray's private API and was checked against Ray %s to "
            "below %s; this is Ray %s, so it is skipped and Ray's own behaviour is kept.",
            feature, ".".join(map(str, low)), ".".join(map(str, high)), version)
    return False
