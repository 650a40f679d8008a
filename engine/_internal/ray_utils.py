"""Connecting to Ray: a local embedded instance by default, a cluster via RAY_ADDRESS."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading

from engine import constants

logger = logging.getLogger(__name__)

# Whether this process's Ray instance was started by ensure_ray (sized by trainyard).
_started_here = False
# Held while ensure_ray starts or joins Ray: a call from another thread (a job driver
# that joins the cluster in the background while it imports) waits for that one.
_init_lock = threading.Lock()


def started_by_trainyard() -> bool:
    """True when :func:`ensure_ray` started the local instance (with its own CPU count);
    False when Ray was already running (``ray.init`` in the script, or Ray Data starting
    it with one logical CPU per core) or is a cluster."""
    return _started_here


def ensure_ray() -> None:
    """Start or join Ray once per process.

    With ``RAY_ADDRESS`` set, joins that cluster. Otherwise starts a local instance with
    at least ``DEFAULT_MIN_RAY_NUM_CPUS`` logical CPUs (``TRAINYARD_RAY_NUM_CPUS``
    overrides) so that Ray Data tasks have room beside the training workers.

    Thread-safe: a call while another thread is starting or joining Ray waits for it
    (a Ray job's driver joins its cluster in the background while it imports).
    """
    import ray

    if ray.is_initialized():
        return
    with _init_lock:
        if not ray.is_initialized():
            _init_ray()


def _init_ray() -> None:
    import ray

    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=True)
        return
    num_cpus = int(os.environ.get(
        constants.RAY_NUM_CPUS_ENV_VAR,
        max(constants.DEFAULT_MIN_RAY_NUM_CPUS, os.cpu_count() or 1),
    ))
    logger.info("Starting a local Ray instance with %d logical CPUs.", num_cpus)
    # No dashboard: it is one more server and seconds of start-up the engine never uses.
    # (Ray advertises the host's address even when asked for 127.0.0.1; its ports are
    # for this machine's processes.)
    # Ray starts worker processes at nice 15 so that its own daemons stay responsive;
    # training workers are this instance's main job and run at the priority torchrun's
    # processes would have (TRAINYARD_RAY_WORKER_NICENESS overrides).
    niceness = int(os.environ.get(constants.RAY_WORKER_NICENESS_ENV_VAR,
                                  constants.DEFAULT_RAY_WORKER_NICENESS))
    before = _child_pids()  # what a failed start must not touch
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            with _quiet_ray_start(), _without_api_server():
                # address="local": start our own instance even when `ray start` (or a
                # test's Cluster) left /tmp/ray/ray_current_cluster behind, which
                # ray.init() would otherwise join — or fail on, when that cluster is gone.
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                         log_to_driver=True, configure_logging=False,
                         _system_config={"worker_niceness": niceness})
            break
        except Exception as exc:
            if attempt == LOCAL_START_ATTEMPTS or _START_TIMEOUT not in str(exc):
                raise
            # Ray gives its raylet a fixed 30 s to register; on a busy machine (CPU
            # starved by other jobs) its agents can take longer to start. What it
            # started is left running: stop it, then start again.
            stopped = _stop_ray_children(before)
            logger.warning("Ray's local start timed out (%s); stopped the %d processes it "
                           "had started and starting it again (attempt %d of %d).",
                           _START_TIMEOUT, stopped, attempt + 1, LOCAL_START_ATTEMPTS)
    global _started_here
    _started_here = True
    # Run before Ray's own exit handler (atexit runs the latest registered first).
    atexit.register(_freeze_heap_at_exit)
    atexit.register(_stop_autoscaler_monitor)


# How Ray 2.60's Node reports a raylet that did not register with its GCS in 30 s.
_START_TIMEOUT = "timed out during startup"
LOCAL_START_ATTEMPTS = 3


def _child_pids() -> set:
    import psutil  # Ray's own copy (ray/thirdparty_files) when not installed

    try:
        return {p.pid for p in psutil.Process().children()}
    except psutil.Error:
        return set()


def _stop_ray_children(before: set) -> int:
    """SIGKILL the Ray processes a failed local start left behind: this process's
    children started since ``before`` that are Ray's (its GCS and raylet binaries, or
    Python running Ray's own modules), with their children (agents, workers). The
    reaper Ray starts beside them is kept: it only acts when this process exits."""
    import psutil  # Ray's own copy (ray/thirdparty_files) when not installed

    victims = []
    for child in psutil.Process().children():
        if child.pid in before:
            continue
        try:
            cmdline = " ".join(child.cmdline())
            if "ray_process_reaper" in cmdline:
                continue
            if child.name() in ("gcs_server", "raylet") or f"{os.sep}ray{os.sep}" in cmdline:
                victims += [child] + child.children(recursive=True)
        except psutil.Error:
            continue
    for proc in victims:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(victims, timeout=10)
    return len(victims)


def _freeze_heap_at_exit() -> None:
    """At interpreter exit, take the driver's heap out of the garbage collector's reach.

    The interpreter runs a full collection while it tears down, and a driver that
    imported Ray, Ray Data and a framework has a heap whose walk took 1.5–2 s of every
    script's exit on the 2-core development VM (py-spy: ``gc_collect_main`` after the
    last line). Frozen objects are still freed by reference counting; only cycles among
    them are left to the process's end, which frees everything anyway."""
    import gc

    gc.freeze()


def _stop_autoscaler_monitor() -> None:
    """At interpreter exit, stop the local instance's autoscaler monitor before Ray's own
    shutdown does: Ray sends it SIGTERM, waits the full second it takes to ignore it,
    then kills it — one second added to every script's exit. A single-node instance
    that is going away needs nothing from it. Best effort: any surprise (another Ray
    version's internals) leaves the shutdown to Ray."""
    import ray

    try:
        if not ray.is_initialized():
            return
        node = ray._private.worker._global_node
        infos = node.all_processes.get("monitor", []) if node is not None else []
        for info in infos:
            proc = info.process
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=2)
    except Exception:  # noqa: BLE001 - never fail an exit over a speed-up
        pass


@contextlib.contextmanager
def _without_api_server():
    """Start the local instance without Ray's API server process.

    With ``include_dashboard=False`` Ray 2.60 still starts its dashboard process, loading
    only the usage-stats module, and ``ray.init()`` polls until the process has written
    its address: 1.1–1.2 s of every local start on the 2-core development VM, for a
    process the engine never talks to (without the dashboard, Ray's state API is not
    among its modules either). ``TRAINYARD_RAY_API_SERVER=1`` keeps Ray's behaviour. Anything
    unexpected (another Ray's internals) leaves the start to Ray."""
    if os.environ.get(constants.RAY_API_SERVER_ENV_VAR, "0") == "1":
        yield
        return
    try:
        from ray._private.node import Node

        original = Node.start_api_server
    except (ImportError, AttributeError):
        yield
        return

    def start_api_server(self, *, include_dashboard, raise_on_failure):
        if include_dashboard:  # asked for: Ray's own start
            return original(self, include_dashboard=include_dashboard,
                            raise_on_failure=raise_on_failure)
        logger.debug("Not starting Ray's API server (%s=1 starts it).",
                     constants.RAY_API_SERVER_ENV_VAR)

    Node.start_api_server = start_api_server
    try:
        yield
    finally:
        Node.start_api_server = original


class _DropMessages(logging.Filter):
    def __init__(self, fragments: tuple) -> None:
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(f in message for f in self.fragments)


@contextlib.contextmanager
def _quiet_ray_start():
    """Keep Ray's start-up notices that need no action out of the user's output.

    Ray 2.60 warns on every local start that token authentication is *enabled* (its
    secure default, on an instance only this machine uses); the warning that it is
    *disabled* still shows."""
    target = logging.getLogger("ray._private.authentication.authentication_token_setup")
    quiet = _DropMessages(("Token authentication is enabled for this Ray cluster",))
    target.addFilter(quiet)
    try:
        yield
    finally:
        target.removeFilter(quiet)
