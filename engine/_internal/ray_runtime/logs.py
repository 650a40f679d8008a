"""Ray's log files: when the console has all the workers' output (the exit waits for
that), and sweeping dead workers' files out of the directory Ray's log monitor scans."""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Dict, Optional

from engine._internal.ray_runtime import instance
from engine._internal.ray_runtime.versions import written_for

logger = logging.getLogger(__name__)

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
        if not written_for("the wait at exit for the workers' output to be streamed"):
            return  # the exit then waits on the files alone
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
    if ((only_own and not instance.started_by_trainyard())
            or now - _last_sweep < WORKER_LOGS_SWEEP_AFTER_S):
        return
    _last_sweep = now
    try:
        node = instance.current_node()
        if node is not None:
            sweep_worker_logs(node.get_logs_dir_path())
    except Exception as exc:  # noqa: BLE001 - housekeeping only
        logger.debug("Sweeping dead workers' log files failed: %s", exc)
