"""Connecting to Ray: a local embedded instance by default, a cluster via RAY_ADDRESS."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import threading
import time
from typing import Dict, List, Optional

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
                _replace_rays_sigterm_handler()


# The thread of an ensure_ray(background=True) start (one per process), and its guard.
_background_thread: "threading.Thread | None" = None
_background_lock = threading.Lock()


def _start_in_background() -> None:
    global _background_thread
    with _background_lock:
        if _background_thread is not None:
            return
        if threading.current_thread() is threading.main_thread():
            # What ray.init() does in the main thread and cannot do from another: a
            # SIGTERM ends the script through its exit handlers (Ray's shutdown).
            import ray._private.utils

            ray._private.utils.set_sigterm_handler(_exit_on_sigterm)
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


def _exit_on_sigterm(signum, frame):
    """The handler ``ray.init()`` installs in the main thread (``sys.exit(signum)``: the
    exit handlers, Ray's shutdown among them, run), plus one thing: it cancels the abort
    that Ray's core worker armed on the same signal.

    The core worker installs Abseil's failure-signal handler for SIGTERM, which prints
    "*** SIGTERM received ***", chains to this handler, and sets a 3-second ``alarm()``
    whose SIGALRM calls ``abort()`` (``alarm_on_failure_secs``, for a crash handler that
    hangs). An exit that takes longer than that (Ray's own shutdown alone took over 3 s
    at load average 20 on the 2-core VM) ended with SIGABRT (-6) instead of 15, its
    exit handlers cut short; 6 of 8 SIGTERMed drivers did, with a foreground start too.
    """
    import signal
    import sys

    signal.alarm(0)
    sys.exit(signum)


def _replace_rays_sigterm_handler() -> None:
    """After ``ray.init()`` in the main thread: :func:`_exit_on_sigterm` in place of Ray's
    handler (only Ray's: a handler installed since is left as it is)."""
    import signal

    current = signal.getsignal(signal.SIGTERM)
    if getattr(current, "__module__", None) == "ray._private.worker":
        signal.signal(signal.SIGTERM, _exit_on_sigterm)


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
    monitor_delay_s = _monitor_delay_s()
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        deferred: list = []
        try:
            with _quiet_ray_start(), _without_api_server(), \
                    _prompt_registration_wait(frozenset(before)), \
                    _monitor_later(deferred, monitor_delay_s):
                # address="local": start our own instance even when `ray start` (or a
                # test's Cluster) left /tmp/ray/ray_current_cluster behind, which
                # ray.init() would otherwise join — or fail on, when that cluster is gone.
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                         log_to_driver=True, configure_logging=False,
                         _system_config={"worker_niceness": niceness,
                                         **_PROMPT_STORE_CONNECT, **_PROMPT_EXIT})
            break
        except Exception as exc:
            if attempt == LOCAL_START_ATTEMPTS or _START_TIMEOUT not in str(exc):
                raise
            # The raylet died before it registered, or did not register within
            # _REGISTRATION_WAIT_ALIVE_S (a CPU-starved machine). What the start left
            # running is stopped, then Ray starts again.
            stopped = _stop_ray_children(before)
            logger.warning("Ray's local start timed out (%s); stopped the %d processes it "
                           "had started and starting it again (attempt %d of %d).",
                           _START_TIMEOUT, stopped, attempt + 1, LOCAL_START_ATTEMPTS)
    global _started_here, _deferred_monitor
    _started_here = True
    if deferred:
        node, start = deferred[-1]
        _deferred_monitor = _DeferredMonitor(node, start, monitor_delay_s)
    # Run before Ray's own exit handler (atexit runs the latest registered first): stop
    # the monitor, freeze the heap, then shut Ray down once its logs are quiet.
    _LOG_CLOCK.listen()
    atexit.register(_shutdown_when_logs_are_quiet)
    atexit.register(_freeze_heap_at_exit)
    atexit.register(_stop_autoscaler_monitor)


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

# How Ray 2.60's Node reports a raylet that did not register with its GCS in 30 s.
_START_TIMEOUT = "timed out during startup"
LOCAL_START_ATTEMPTS = 3


def _child_pids() -> set:
    import psutil  # Ray's own copy (ray/thirdparty_files) when not installed

    try:
        return {p.pid for p in psutil.Process().children()}
    except psutil.Error:
        return set()


def _children_since(before) -> list:
    """This process's children (psutil processes) whose pids are not in ``before``."""
    import psutil  # Ray's own copy (ray/thirdparty_files) when not installed

    try:
        return [c for c in psutil.Process().children() if c.pid not in before]
    except psutil.Error:
        return []


def _stop_ray_children(before: set) -> int:
    """SIGKILL the Ray processes a failed local start left behind: this process's
    children started since ``before`` that are Ray's (its GCS and raylet binaries, or
    Python running Ray's own modules), with their children (agents, workers). The
    reaper Ray starts beside them is kept: it only acts when this process exits."""
    import psutil  # Ray's own copy (ray/thirdparty_files) when not installed

    victims = []
    for child in _children_since(before):
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


#: The workers' log files that Ray's log monitor has not opened (yet) count as read
#: once unchanged this long: the monitor looks at them every 0.1 s while they are quiet.
_LOG_FILES_QUIET_S = 0.25
#: ... and the console as up to date once no batch of lines arrived this long.
_LOG_BATCH_QUIET_S = 0.1


class _LogClock:
    """When the driver last received a batch of worker output from Ray's log stream."""

    def __init__(self) -> None:
        self.last = 0.0

    def listen(self) -> None:
        try:
            from ray._private.worker import global_worker_stdstream_dispatcher

            global_worker_stdstream_dispatcher.remove_handler("trainyard_log_clock")
            global_worker_stdstream_dispatcher.add_handler("trainyard_log_clock", self._seen)
        except Exception:  # noqa: BLE001 - then the exit waits on the files alone
            pass

    def _seen(self, data) -> None:
        self.last = time.monotonic()


_LOG_CLOCK = _LogClock()


def _logs_quiet(logs_dir: str, monitor_pid: Optional[int], now_wall: float,
                now_mono: float) -> bool:
    """Whether the console has everything Ray streams to it (the workers'
    ``worker-*.out``/``.err``, the raylet's and the GCS's ``.err`` in ``logs_dir``):
    no batch reached the driver within ``_LOG_BATCH_QUIET_S``, Ray's log monitor has read
    every such file it holds open to its end (its file offsets, from ``/proc``), and no
    other such file changed within ``_LOG_FILES_QUIET_S``."""
    if now_mono - _LOG_CLOCK.last < _LOG_BATCH_QUIET_S:
        return False
    offsets = _open_offsets(monitor_pid, logs_dir)
    try:
        with os.scandir(logs_dir) as entries:
            for entry in entries:
                if not _streamed(entry.name):
                    continue
                try:
                    stat = entry.stat()
                except FileNotFoundError:  # moved to old/ once read
                    continue
                read_to = offsets.get(entry.path)
                if read_to is not None:
                    if read_to < stat.st_size:
                        return False
                elif now_wall - stat.st_mtime < _LOG_FILES_QUIET_S:
                    return False
    except OSError:
        return False
    return True


def _open_offsets(pid: Optional[int], logs_dir: str) -> Dict[str, int]:
    """Path → file offset of the files in ``logs_dir`` that process ``pid`` holds open
    (Linux's ``/proc/<pid>/fdinfo``); empty where that cannot be read."""
    out: Dict[str, int] = {}
    if pid is None:
        return out
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return out
    prefix = os.path.join(logs_dir, "")
    for fd in fds:
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
            if not target.startswith(prefix):
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith("pos:"):
                        out[target] = int(line.split()[1])
                        break
        except (OSError, ValueError):
            continue
    return out


def _streamed(name: str) -> bool:
    """Whether Ray's log monitor (``ray._private.log_monitor``) streams this log file
    to the driver (its autoscaler ``monitor.log`` aside: the engine stops the monitor
    first at exit)."""
    return ((name.startswith("worker") and name.endswith((".out", ".err")))
            or (name.startswith(("raylet", "gcs_server")) and name.endswith(".err")))


#: A dead worker's log files are moved out of the session's log directory once they
#: have been unchanged this long (Ray's log monitor reads them every 0.1 s).
WORKER_LOGS_SWEEP_AFTER_S = 60.0
# A worker's stdout/stderr (worker-<worker id>-<job id>-<pid>.out/.err) and its core
# worker's log (python-core-worker-<worker id>_<pid>.log), as Ray 2.60 names them.
_WORKER_LOG = re.compile(r"^(?:worker-[0-9a-f]+-[0-9a-f]+-(\d+)\.(?:out|err)"
                         r"|python-core-worker-[0-9a-f]+_(\d+)\.log)$")
_last_sweep = 0.0


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` names a running process. A zombie (exited, its parent has not
    reaped it yet: the raylet, slowly, on a loaded machine) has exited: not alive."""
    import psutil  # Ray's own copy (ray/thirdparty_files) when not installed

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False
    except psutil.Error:  # AccessDenied and the like: cannot tell, so alive
        return True


def sweep_worker_logs(logs_dir: str, older_than_s: float = WORKER_LOGS_SWEEP_AFTER_S,
                      now: Optional[float] = None, alive=_pid_alive) -> int:
    """Move the log files of workers that are gone, and unchanged for ``older_than_s``,
    into ``<logs_dir>/old/``; how many were moved.

    Ray's log monitor lists the session's log directory five times every 0.1 s, so its
    CPU grows with every worker the session ever started: each worker process leaves
    three files (its ``.out``, ``.err`` and core worker log), and on the 2-core
    development VM the monitor of a local Ray went from 0.3 to 1.3 CPU-seconds a minute
    over 200 two-worker fits (455 files). Ray moves a dead worker's output files to
    ``old/`` itself only when it closes the 200 files it holds open, and never its core
    worker log. Moved files stay readable where Ray puts them; an open file is read
    on to its end by the monitor all the same."""
    now = time.time() if now is None else now
    moved = 0
    try:
        with os.scandir(logs_dir) as it:
            entries = list(it)
    except OSError:
        return 0
    for entry in entries:
        match = _WORKER_LOG.match(entry.name)
        if match is None:
            continue
        try:
            if now - entry.stat().st_mtime < older_than_s:
                continue
            if alive(int(match.group(1) or match.group(2))):
                continue
            os.makedirs(os.path.join(logs_dir, "old"), exist_ok=True)
            os.replace(entry.path, os.path.join(logs_dir, "old", entry.name))
            moved += 1
        except OSError:  # gone meanwhile (Ray moved it) or not ours to move
            continue
    return moved


def sweep_worker_logs_if_due(only_own: bool = True) -> None:
    """After a worker group stopped, on a local instance this process started: at most
    once every ``WORKER_LOGS_SWEEP_AFTER_S``, :func:`sweep_worker_logs` on its session
    (a long-lived driver, a notebook or a served deployment, fits again and again).
    ``only_own=False``: on whatever instance this process is connected to (the test
    session's own Rays). Best effort: never fails the caller."""
    global _last_sweep
    now = time.monotonic()
    if (only_own and not _started_here) or now - _last_sweep < WORKER_LOGS_SWEEP_AFTER_S:
        return
    _last_sweep = now
    try:
        import ray

        node = ray._private.worker._global_node
        if node is not None:
            sweep_worker_logs(node.get_logs_dir_path())
    except Exception as exc:  # noqa: BLE001 - housekeeping only
        logger.debug("Sweeping dead workers' log files failed: %s", exc)


def _seconds_setting(name: str, default: float, meaning: str, example: str) -> float:
    """A setting of seconds >= 0; its default, with a warning, when it is not one (a
    start or an exit is no place to raise)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
        if value >= 0:
            return value
    except ValueError:
        pass
    logger.warning("%s=%r is not a number of seconds >= 0; %s %s s. Set it to e.g. %s.",
                   name, raw, meaning, default, example)
    return default


def _exit_log_wait_s() -> float:
    """``TRAINYARD_RAY_EXIT_LOG_WAIT_S``."""
    return _seconds_setting(constants.RAY_EXIT_LOG_WAIT_ENV_VAR,
                            constants.DEFAULT_RAY_EXIT_LOG_WAIT_S,
                            "waiting for the workers' output at exit at most", "0.5")


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
        worker = ray._private.worker.global_worker
        node = ray._private.worker._global_node
        if not ray.is_initialized() or node is None or worker.mode != ray.SCRIPT_MODE:
            return
        logs_dir = node.get_logs_dir_path()
        monitors = node.all_processes.get("log_monitor") or []
        monitor_pid = monitors[0].process.pid if monitors else None
        wait = _exit_log_wait_s()
        start = time.monotonic()
        while time.monotonic() - start < wait and not _logs_quiet(
                logs_dir, monitor_pid, time.time(), time.monotonic()):
            time.sleep(0.02)
        logger.debug("Exit: waited %.2f s for the workers' output to be streamed.",
                     time.monotonic() - start)
        ray.shutdown()
    except Exception:  # noqa: BLE001 - never fail an exit over a speed-up
        pass


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
        for proc in _monitor_processes(ray._private.worker._global_node):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=2)
    except Exception:  # noqa: BLE001 - never fail an exit over a speed-up
        pass


def _monitor_delay_s() -> float:
    """``TRAINYARD_RAY_MONITOR_DELAY_S``."""
    return _seconds_setting(constants.RAY_MONITOR_DELAY_ENV_VAR,
                            constants.DEFAULT_RAY_MONITOR_DELAY_S,
                            "starting Ray's autoscaler monitor after Ray by",
                            "10, or 0 to start it with Ray")


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


def _current_node():
    """Ray's node of this process (None after ``ray.shutdown()``)."""
    import ray

    return ray._private.worker._global_node


# The local instance's autoscaler monitor, until it has started (one per process).
_deferred_monitor: Optional[_DeferredMonitor] = None


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

    def replace(original):
        def start_api_server(self, *, include_dashboard, raise_on_failure):
            if include_dashboard:  # asked for: Ray's own start
                return original(self, include_dashboard=include_dashboard,
                                raise_on_failure=raise_on_failure)
            logger.debug("Not starting Ray's API server (%s=1 starts it).",
                         constants.RAY_API_SERVER_ENV_VAR)
        return start_api_server

    with _node_method_replaced("start_api_server", replace):
        yield


@contextlib.contextmanager
def _node_method_replaced(name: str, replace):
    """In this block Ray's ``Node.<name>`` is ``replace(original)``; a Ray without that
    method (other internals) is left as it is."""
    try:
        from ray._private.node import Node

        original = getattr(Node, name)
    except (ImportError, AttributeError):
        yield
        return
    setattr(Node, name, replace(original))
    try:
        yield
    finally:
        setattr(Node, name, original)


@contextlib.contextmanager
def _prompt_registration_wait(before: frozenset = frozenset()):
    """Let ``ray.init()`` see the raylet's registration as soon as it happens.

    After starting the raylet, Ray 2.60's ``Node`` asks the GCS for the node once and the
    GCS client's lookup retries only once a second: the start took 2.1 s or 3.1 s on the
    2-core development VM depending on where the registration fell in that second. Here
    the lookup first polls the GCS's node table every 50 ms, so Ray's lookup then finds
    the node at once.

    Ray fails ``ray.init()`` when the raylet has not registered in time: 30 s, plus the
    retries of its own lookup (a raylet stopped for 40 s still made it, one stopped for
    90 s did not). On a CPU-starved machine (the 2-core VM at a load average of 20, a busy
    orchestrator worker) the start can need longer, and starting again only repeats the
    same work under the same load (three starts in a row failed this way in a full test run on
    2026-11-29). So past 30 s the poll goes on, up to ``_REGISTRATION_WAIT_ALIVE_S``,
    for as long as the raylet this start launched (a child of this process not in
    ``before``) is running; Ray's lookup runs once it ends, and fails as before when the
    node never came. Anything unexpected (another Ray's internals) leaves the wait to
    Ray."""
    try:
        import ray._private.services as services
        from ray._private.state import GlobalState

        original = services.get_node
        client_options = services._get_gcs_client_options
    except (ImportError, AttributeError):
        yield
        return

    def get_node(gcs_address, node_id):
        state = GlobalState()
        try:
            state._initialize_global_state(client_options(gcs_address))
            start = time.monotonic()
            check_raylet_at, warned = start + _REGISTRATION_WAIT_S, False
            while not any(n.get("NodeID") == node_id for n in state.node_table()):
                now = time.monotonic()
                if now - start >= _REGISTRATION_WAIT_ALIVE_S:
                    break
                if now >= check_raylet_at:
                    if not _raylet_alive(before):
                        break
                    if not warned:
                        warned = True
                        logger.warning(
                            "Ray's raylet has not registered within %.0f s (a busy "
                            "machine?); waiting on while it runs, up to %.0f s in all.",
                            _REGISTRATION_WAIT_S, _REGISTRATION_WAIT_ALIVE_S)
                    check_raylet_at = now + 1.0
                time.sleep(0.05)
        except Exception as exc:  # noqa: BLE001 - Ray's own lookup still runs below
            logger.debug("Polling the GCS for the raylet's registration failed: %s", exc)
        finally:
            with contextlib.suppress(Exception):
                state.disconnect()
        return original(gcs_address, node_id)

    services.get_node = get_node
    try:
        yield
    finally:
        services.get_node = original


# Ray's own limit on the raylet's registration (ray/_private/node.py; its lookup then
# retries for a while), and how long the engine polls in all while the raylet runs
# (see _prompt_registration_wait).
_REGISTRATION_WAIT_S = 30.0
_REGISTRATION_WAIT_ALIVE_S = 180.0


def _raylet_alive(before: frozenset) -> bool:
    """Whether a raylet this process started, and not among ``before``, still runs."""
    import psutil  # Ray's own copy (ray/thirdparty_files) when not installed

    for child in _children_since(before):
        with contextlib.suppress(psutil.Error):
            if child.name() == "raylet" and child.status() != psutil.STATUS_ZOMBIE:
                return True
    return False


class _DropMessages(logging.Filter):
    def __init__(self, fragments: tuple) -> None:
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(f in message for f in self.fragments)


# Ray's notice that ray.init() outside the main thread sets no SIGTERM handler: a
# background start sets Ray's handler itself, from the caller's (main) thread.
_NOT_MAIN_THREAD_NOTICE = _DropMessages(("SIGTERM handler is not set",))


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
