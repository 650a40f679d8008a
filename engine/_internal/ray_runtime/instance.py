"""This process's Ray instance: whether trainyard started it, and Ray's node and worker
objects behind it (private API, version-checked)."""

from __future__ import annotations

import logging
from typing import Any, Optional

from engine._internal.ray_runtime.versions import written_for

logger = logging.getLogger(__name__)

# Whether this process's Ray instance was started by ensure_ray (sized by trainyard).
_started_here = False


def started_by_trainyard() -> bool:
    """True when :func:`ensure_ray` started the local instance (with its own CPU count);
    False when Ray was already running (``ray.init`` in the script, or Ray Data starting
    it with one logical CPU per core) or is a cluster."""
    return _started_here


def mark_started() -> None:
    """Record that :func:`ensure_ray` started this process's local instance."""
    global _started_here
    _started_here = True


def current_node() -> Optional[Any]:
    """Ray's node of this process (``ray._private.worker._global_node``; None after
    ``ray.shutdown()``, and None outside the Ray versions this was checked against)."""
    if not written_for("access to Ray's node (log sweeping, the exit, the monitor)"):
        return None
    import ray

    return ray._private.worker._global_node


def script_mode() -> bool:
    """Whether this process is a Ray driver (a script), not one of Ray's workers; False
    outside the Ray versions this was checked against."""
    if not written_for("the quick exit of a driver"):
        return False
    import ray

    return ray._private.worker.global_worker.mode == ray.SCRIPT_MODE


def node_ip_address() -> str:
    """The address Ray knows this node by (its worker's, without a lookup where the Ray
    version is one this was checked against; ``ray.util.get_node_ip_address()`` else)."""
    import ray

    if written_for("reading the node's address from Ray's worker"):
        address = ray._private.worker.global_worker.node_ip_address
        if address:
            return address
    return ray.util.get_node_ip_address()
