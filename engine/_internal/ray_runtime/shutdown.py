"""A script's exit on the local instance: Ray shut down once the workers' output has
reached the console, and the heap frozen so the interpreter's last collection is short."""

from __future__ import annotations

import logging
import time

from engine._internal.ray_runtime import instance
from engine._internal.ray_runtime.logs import _logs_quiet
from engine._internal.ray_runtime.settings import exit_log_wait_s

logger = logging.getLogger(__name__)


def _freeze_heap_at_exit() -> None:
    """At interpreter exit, take the driver's heap out of the garbage collector's reach.

    The interpreter runs a full collection while it tears down, and a driver that
    imported Ray, Ray Data and a framework has a heap whose walk took 1.5–2 s of every
    script's exit on the 2-core development VM (py-spy: ``gc_collect_main`` after the
    last line). Frozen objects are still freed by reference counting; only cycles among
    them are left to the process's end, which frees everything anyway."""
    import gc

    gc.freeze()


def _shutdown_when_logs_are_quiet() -> None:
    """At interpreter exit, shut the local instance down as soon as the workers' output
    has reached the console, instead of after Ray's fixed half second.

    Ray's exit handler sleeps 0.5 s in every script (so that the last lines the workers
    printed are streamed to the console), then shuts down: half a second of every step's
    exit, also when the workers ended long before. This waits until the console has
    their output (:func:`_logs_quiet`), at most ``TRAINYARD_RAY_EXIT_LOG_WAIT_S`` (0.5 s,
    as Ray), then runs the same ``ray.shutdown()``; Ray's own handler then finds nothing
    left to do. Best effort: any surprise leaves the exit to Ray's handler."""
    import ray

    try:
        node = instance.current_node()
        if not ray.is_initialized() or node is None or not instance.script_mode():
            return
        logs_dir = node.get_logs_dir_path()
        monitors = node.all_processes.get("log_monitor") or []
        monitor_pid = monitors[0].process.pid if monitors else None
        wait = exit_log_wait_s()
        start = time.monotonic()
        while time.monotonic() - start < wait and not _logs_quiet(
                logs_dir, monitor_pid, time.time(), time.monotonic()):
            time.sleep(0.02)
        logger.debug("Exit: waited %.2f s for the workers' output to be streamed.",
                     time.monotonic() - start)
        ray.shutdown()
    except Exception:  # noqa: BLE001 - never fail an exit over a speed-up
        pass
