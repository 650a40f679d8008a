"""Starting or joining Ray: a local embedded instance by default, a cluster via
RAY_ADDRESS."""

from __future__ import annotations

import atexit
import logging
import os
import threading

from engine import constants
from engine._internal.ray_runtime import children, instance, monitor, shutdown, signals
from engine._internal.ray_runtime.logs import _LOG_CLOCK
from engine._internal.ray_runtime.node_patches import (prompt_registration_wait,
                                                       without_api_server)
from engine._internal.ray_runtime.notices import _NOT_MAIN_THREAD_NOTICE, _quiet_ray_start
from engine._internal.ray_runtime import settings
from engine._internal.ray_runtime.versions import written_for

logger = logging.getLogger(__name__)

# Held while ensure_ray starts or joins Ray: a call from another thread (a job driver
# that joins the cluster in the background while it imports) waits for that one.
_init_lock = threading.Lock()


def ensure_ray(background: bool = False) -> None:
    """Start or join Ray once per process.

    With ``RAY_ADDRESS`` set, joins that cluster. Otherwise starts a local instance with
    at least ``DEFAULT_MIN_RAY_NUM_CPUS`` logical CPUs (``TRAINYARD_RAY_NUM_CPUS``
    overrides) so that Ray Data tasks have room beside the training workers.

    Thread-safe: a call while another thread is starting or joining Ray waits for it
    (a Ray job's driver joins its cluster in the background while it imports).

    ``background=True`` returns at once and starts (or joins) Ray in a thread, so that
    the seconds Ray's start takes pass while the caller imports its framework and
    prepares its inputs. The next plain call (every ``fit()`` makes one) waits for it;
    if the background start failed, that call starts Ray again itself and raises its
    error in the caller's thread.
    """
    import ray

    if ray.is_initialized():
        return
    if background:
        _start_in_background()
        return
    with _init_lock:
        if not ray.is_initialized():
            _init_ray()
            if threading.current_thread() is threading.main_thread():
                signals._replace_rays_sigterm_handler()


# The thread of an ensure_ray(background=True) start (one per process), and its guard.
_background_thread: "threading.Thread | None" = None
_background_lock = threading.Lock()


def _start_in_background() -> None:
    global _background_thread
    with _background_lock:
        if _background_thread is not None:
            return
        if threading.current_thread() is threading.main_thread():
            signals.set_exit_on_sigterm_from_main_thread()
        logging.getLogger("ray._private.worker").addFilter(_NOT_MAIN_THREAD_NOTICE)

        def start() -> None:
            try:
                ensure_ray()
            except Exception as exc:  # noqa: BLE001 - the next ensure_ray() raises it
                logger.debug("Ray's background start failed (%s); the next call retries.",
                             exc)
                return
            # Ray starts its GCS and raylet with PR_SET_PDEATHSIG, which Linux fires when
            # the *thread* that started them ends, not the process: this thread must
            # outlive the instance. It waits here until the process exits.
            threading.Event().wait()

        _background_thread = threading.Thread(target=start, name="trainyard-ray-start",
                                              daemon=True)
        _background_thread.start()


def _init_ray() -> None:
    import ray

    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=True)
        return
    num_cpus = constants.get(constants.RAY_NUM_CPUS_ENV_VAR) or max(
        constants.DEFAULT_MIN_RAY_NUM_CPUS, os.cpu_count() or 1)
    logger.info("Starting a local Ray instance with %d logical CPUs.", num_cpus)
    # No dashboard: it is one more server and seconds of start-up the engine never uses.
    # (Ray advertises the host's address even when asked for 127.0.0.1; its ports are
    # for this machine's processes.)
    # Ray starts worker processes at nice 15 so that its own daemons stay responsive;
    # training workers are this instance's main job and run at the priority torchrun's
    # processes would have (TRAINYARD_RAY_WORKER_NICENESS overrides).
    niceness = constants.get(constants.RAY_WORKER_NICENESS_ENV_VAR)
    monitor_delay_s = settings.read_at_start()
    before = children.child_pids()  # what a failed start must not touch
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        deferred: list = []
        try:
            with _quiet_ray_start(), without_api_server(), \
                    prompt_registration_wait(frozenset(before)), \
                    monitor._monitor_later(deferred, monitor_delay_s):
                # address="local": start our own instance even when `ray start` (or a
                # test's Cluster) left /tmp/ray/ray_current_cluster behind, which
                # ray.init() would otherwise join — or fail on, when that cluster is gone.
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                         log_to_driver=True, configure_logging=False,
                         _system_config=_system_config(niceness))
            break
        except Exception as exc:
            if attempt == LOCAL_START_ATTEMPTS or _START_TIMEOUT not in str(exc):
                raise
            # The raylet died before it registered, or did not register within
            # _REGISTRATION_WAIT_ALIVE_S (a CPU-starved machine). What the start left
            # running is stopped, then Ray starts again.
            stopped = children.stop_ray_children(before)
            logger.warning("Ray's local start timed out (%s); stopped the %d processes it "
                           "had started and starting it again (attempt %d of %d).",
                           _START_TIMEOUT, stopped, attempt + 1, LOCAL_START_ATTEMPTS)
    instance.mark_started()
    if deferred:
        node, start = deferred[-1]
        monitor.defer(node, start, monitor_delay_s)
    # Run before Ray's own exit handler (atexit runs the latest registered first): stop
    # the monitor, freeze the heap, then shut Ray down once its logs are quiet.
    _LOG_CLOCK.listen()
    atexit.register(shutdown._shutdown_when_logs_are_quiet)
    atexit.register(shutdown._freeze_heap_at_exit)
    atexit.register(monitor._stop_autoscaler_monitor)


# The raylet starts its object store in a thread and then connects to the store's socket;
# when the socket is not there yet, Ray 2.60 retries only after
# raylet_client_connect_timeout_milliseconds (1000 ms, 10 attempts). On the 2-core
# development VM that race was lost in about half of all starts: the raylet, and so
# ray.init(), one second late (local starts of 1.3-1.5 s or 2.2-2.4 s; with this, 12 of
# 12 at 1.2-1.4 s). The same 10 s in all, tried every 20 ms. The setting covers every
# client of this raylet's sockets (drivers, workers), which get the same 10 s.
_PROMPT_STORE_CONNECT = {"raylet_client_connect_timeout_milliseconds": 20,
                         "raylet_client_num_connect_attempts": 500}

# A driver's (and a worker's) core worker waits, when it shuts down, for its last task
# events to reach the GCS (up to task_events_shutdown_flush_timeout_ms): the driver's
# part of ray.shutdown() took 0.26 s in 6 of 6 exits on the 2-core development VM, and
# 0.01 s in 5 of 8 without that wait (the others still wait 0.26 s, on a gRPC polling
# thread's join). On the engine's own local instance those events serve only Ray's
# state API and ray.timeline(), from a GCS that the same exit stops a moment later;
# they are still reported every second while the instance runs.
_PROMPT_EXIT = {"task_events_shutdown_flush_timeout_ms": 0}


def _system_config(niceness: int) -> dict:
    """Ray's internal settings for the local instance: the workers' niceness, and the
    prompt settings above where the Ray version is one they were checked against (a key
    Ray no longer knows fails its start)."""
    if written_for("Ray's internal settings for a prompt start and exit"):
        return {"worker_niceness": niceness, **_PROMPT_STORE_CONNECT, **_PROMPT_EXIT}
    return {"worker_niceness": niceness}


# How Ray 2.60's Node reports a raylet that did not register with its GCS in 30 s.
_START_TIMEOUT = "timed out during startup"
LOCAL_START_ATTEMPTS = 3
