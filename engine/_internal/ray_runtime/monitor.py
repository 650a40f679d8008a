"""Ray's autoscaler monitor on a local instance: started some seconds after Ray instead of
with it, reniced, and stopped first at exit (Ray's private ``Node.start_monitor`` and
``all_processes``)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import List, Optional

from engine import constants
from engine._internal.ray_runtime.instance import current_node as _current_node
from engine._internal.ray_runtime.node_patches import _node_method_replaced

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def _monitor_later(deferred: list, delay_s: float):
    """Start the local instance without Ray's autoscaler monitor, recording in
    ``deferred`` the node and Ray's own start of it for :class:`_DeferredMonitor`.

    On a single node the monitor autoscales nothing; what it does is report resource
    requests that cannot be scheduled ("No available node types can fulfill resource
    request ..."), about 4 s after they are made. Its start costs about 0.7 CPU-s (a
    Python process importing Ray and its autoscaler), as much as a worker, and on a
    2-core machine it competes with the script's imports and the workers' start (the
    XGBoost benchmark's whole process: 1.95–1.97× its anchor with the monitor, 1.83–1.84×
    with it deferred). With the monitor ``TRAINYARD_RAY_MONITOR_DELAY_S`` (10 s) after
    Ray, a step that ends sooner never pays for it, and a task that cannot be scheduled
    is reported that much later. 0, or anything unexpected (another Ray's internals),
    leaves the start to Ray."""
    if delay_s == 0:
        yield
        return

    def replace(original):
        def start_monitor(self):
            deferred.append((self, original))
        return start_monitor

    with _node_method_replaced("start_monitor", replace):
        yield


class _DeferredMonitor:
    """Starts Ray's autoscaler monitor for ``node`` after ``delay_s``, unless the process
    is exiting (:meth:`cancel`) or Ray was shut down (and maybe started again) first."""

    def __init__(self, node, start, delay_s: float) -> None:
        self._node, self._start, self._delay_s = node, start, delay_s
        self._lock = threading.Lock()
        self._cancelled = False
        self._wake = threading.Event()
        self.started = False
        self._thread = threading.Thread(target=self._run, name="trainyard-ray-monitor",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._wake.wait(self._delay_s)
        with self._lock:
            if self._cancelled or _current_node() is not self._node:
                return
            try:
                self._start(self._node)
            except Exception as exc:  # noqa: BLE001 - Ray runs on without its monitor
                logger.warning("Could not start Ray's autoscaler monitor (%s): tasks that "
                               "cannot be scheduled will not be reported.", exc)
                return
            self.started = True
            _lower_priority([p.pid for p in _monitor_processes(self._node)],
                            constants.RAY_MONITOR_NICENESS)
        # Ray starts the monitor with PR_SET_PDEATHSIG, which Linux fires when the
        # *thread* that started it ends: this thread waits here until the process exits.
        threading.Event().wait()

    def cancel(self) -> None:
        with self._lock:  # a start under way finishes first (and is then stopped)
            self._cancelled = True
        self._wake.set()


def _monitor_processes(node) -> list:
    """The autoscaler monitor processes Ray started for ``node`` (none for no node)."""
    infos = getattr(node, "all_processes", {}).get("monitor", [])
    return [info.process for info in infos if info.process is not None]


def _lower_priority(pids: List[int], niceness: int) -> None:
    """Renice ``pids`` to ``niceness`` right after their start, before they import.

    The deferred monitor starts about when the training loop does, and its start costs
    about 0.9 CPU-s on the 2-core development VM. At Ray's niceness it takes its share of
    cores the workers fill; at 19 it gets what they leave, and on a busy machine reports
    a task that cannot be scheduled a little later. (In the DDP benchmark the two ranks
    use about 1.6 of the 2 cores and the monitor's start fits in the rest either way:
    in-loop 1.01× torchrun reniced, 1.04× not, in the same hour.) A process that cannot
    be reniced runs on as it is."""
    for pid in pids:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, max(niceness, os.getpriority(
                os.PRIO_PROCESS, pid)))
        except OSError as exc:
            logger.debug("Could not renice process %d (%s).", pid, exc)


def defer(node, start, delay_s: float) -> None:
    """Start Ray's monitor for ``node`` ``delay_s`` after now (what :func:`_monitor_later`
    recorded), unless the process exits first."""
    global _deferred_monitor
    _deferred_monitor = _DeferredMonitor(node, start, delay_s)


# The local instance's autoscaler monitor, until it has started (one per process).
_deferred_monitor: Optional[_DeferredMonitor] = None


def _stop_autoscaler_monitor() -> None:
    """At interpreter exit, stop the local instance's autoscaler monitor before Ray's own
    shutdown does: Ray sends it SIGTERM, waits the full second it takes to ignore it,
    then kills it — one second added to every script's exit. A single-node instance
    that is going away needs nothing from it. Best effort: any surprise (another Ray
    version's internals) leaves the shutdown to Ray."""
    import ray

    if _deferred_monitor is not None:
        _deferred_monitor.cancel()  # not started yet: it never will be
    try:
        if not ray.is_initialized():
            return
        for proc in _monitor_processes(_current_node()):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=2)
    except Exception:  # noqa: BLE001 - never fail an exit over a speed-up
        pass
