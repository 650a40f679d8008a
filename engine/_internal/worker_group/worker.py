"""The worker actor: runs ``train_func`` in a thread and hands reports to the driver."""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import socket
import sys
import threading
import traceback
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from engine._internal.execution.failure_diagnosis import worker_raised
from engine._internal.run_state import timeline
from engine._internal.worker_group import session as _session
from engine._internal.worker_group import reset as worker_reset
from engine._internal.worker_group.output_capture import capture
from engine.exceptions import WorkerError


def _node_ip() -> str:
    """The address Ray knows this node by."""
    try:
        from engine._internal.ray_runtime.instance import node_ip_address

        return node_ip_address()
    except Exception:  # outside Ray (unit tests)
        return "127.0.0.1"


# Ports for servers a framework binds itself are drawn from here up to the kernel's
# ephemeral range: a port bound as port 0 (and closed) could be taken by the next
# process that binds port 0 or connects out (Ray's gRPC servers, a store client) before
# the framework binds it; a port below that range is only taken by name. From 20000:
# above Ray's worker ports (10002-19999 by default).
_DRAW_LOW = 20000


def draw_free_port(attempts: int = 200) -> int:
    """A port free on every interface now, drawn below the ephemeral range; a port-0
    one where that range leaves no room or all draws were taken."""
    import random

    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):  # not Linux
        ephemeral_low = 32768
    draw = random.SystemRandom()  # not the user's seeded generator: workers differ
    for _ in range(attempts if ephemeral_low > _DRAW_LOW else 0):
        port = draw.randrange(_DRAW_LOW, ephemeral_low)
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _call_train_func(train_func: Callable, config: Optional[Dict[str, Any]]) -> Any:
    try:
        params = inspect.signature(train_func).parameters
    except (TypeError, ValueError):
        params = {"config": None}
    if len(params) == 0:
        return train_func()
    return train_func(config if config is not None else {})


def _freeze_startup_objects() -> None:
    """Move every object alive now (Ray's, the frameworks' and the engine's modules) out
    of the cyclic garbage collector's reach before ``train_func`` runs.

    A Ray worker's heap is several times a plain training process's, and each of the
    collector's full passes walks all of it: in a loop that allocates (a small DDP
    model's steps) that made the same loop about 10 % slower than under torchrun
    (measured in a plain Ray actor as in ours). Frozen objects are still freed when
    their reference count drops; only cycles among them wait for ``gc.unfreeze()``, so
    garbage is collected first.

    In a fresh worker that garbage is what the last moments left, in the young
    generations: a full pass there found none (0 objects, in plain and torch workers)
    and took 0.04 CPU-s of a plain worker, 0.19 s of a torch one (370,000 objects),
    on every worker of every fit. A reused worker (the Tuner's) holds the last trial's
    cycles in the oldest generation after ``_unfreeze``: it gets the full pass."""
    gc.collect(2 if _ran_train_func else 1)
    gc.freeze()


# Whether this process has run a train_func before (then it is a reused worker).
_ran_train_func = False


def _unfreeze() -> None:
    """After ``train_func``: a reused worker (the Tuner's) collects the last trial's
    cycles before it freezes again."""
    global _ran_train_func
    _ran_train_func = True
    if gc.get_freeze_count():
        gc.unfreeze()


def _name_log_prefix(rank: int) -> None:
    """Make Ray prefix this worker's forwarded output with its rank:
    ``(rank 0 pid=123)``. Ray's log monitor renames an actor's output from a line
    ``:actor_name:<name>`` in its log files (what it prints for an actor's __repr__);
    the rank is known only now, after the actor started, so it is printed here."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.write(f":actor_name:rank {rank}\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not stop training
            pass


@contextlib.contextmanager
def _in_dir(path: str) -> Iterator[None]:
    """Run the block in ``path`` (made if missing), as Ray Tune starts a trial in its
    directory; back to where the process was afterwards (a Tuner reuses workers)."""
    if not path:
        yield
        return
    previous = os.getcwd()
    os.makedirs(path, exist_ok=True)
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


class TrainWorker:
    """One training process. Wrapped with ``ray.remote`` by the worker group."""

    def __init__(self, env: Optional[Dict[str, str]] = None) -> None:
        # The group's environment (TensorFlow's log level, legacy Keras), set before
        # anything of the user's is unpickled here, so before a framework is imported.
        # Not a runtime_env: a worker with one cannot be a prestarted process, and Ray
        # starts it through setup_worker.py, which imports Ray once more (~0.5 CPU-s).
        os.environ.update({k: str(v) for k, v in (env or {}).items()})
        worker_reset.snapshot()  # what reset() brings a reused process back to
        self._session: Optional[_session.TrainSession] = None
        self._thread: Optional[threading.Thread] = None
        self._done = False
        self._error: Optional[WorkerError] = None

    # --- introspection and generic execution -------------------------------------
    def node_info(self) -> Dict[str, Any]:
        gpu_ids: List[str] = []
        try:
            import ray

            gpu_ids = [str(g) for g in ray.get_gpu_ids()]
            node_id = ray.get_runtime_context().get_node_id()
        except Exception:
            node_id = "local"
        return {"node_id": node_id, "node_ip": _node_ip(), "hostname": socket.gethostname(),
                "pid": os.getpid(), "gpu_ids": gpu_ids}

    def execute(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    def set_env(self, env: Dict[str, str]) -> None:
        os.environ.update({k: str(v) for k, v in env.items()})

    def free_port(self) -> Tuple[str, int]:
        """This node's address and a port free now, for a server a framework starts
        next on this worker (TensorFlow's gRPC server, LightGBM's sockets)."""
        return _node_ip(), draw_free_port()

    # --- training ----------------------------------------------------------------
    def start_training(self, train_func: Callable, config: Optional[Dict[str, Any]],
                       session_args: Dict[str, Any],
                       before_train: Optional[Callable[[], None]] = None) -> None:
        timeline.take()  # a reused actor (Tuner) keeps no marks of the last trial
        timeline.mark("train_thread_start")
        session = _session.TrainSession(**session_args)
        self._session = session
        _name_log_prefix(session.context.world_rank)
        self._done, self._error = False, None  # a reused actor (Tuner) starts afresh
        session._node_ip = _node_ip()
        _session.init_session(session)

        def run() -> None:
            try:
                with capture(session.output), _in_dir(session.context.working_dir):
                    if before_train is not None:
                        before_train()
                    _freeze_startup_objects()
                    _call_train_func(train_func, config)
                    timeline.mark("train_func_returned")
            except BaseException as exc:  # noqa: BLE001 - reported to the driver
                session.error = exc
                session.traceback_str = traceback.format_exc()
            finally:
                _unfreeze()
                session.mark_finished()

        self._thread = threading.Thread(target=run, name="trainyard-train", daemon=True)
        self._thread.start()

    def poll(self, timeout: float
             ) -> Tuple[List[_session.ReportItem], bool, Optional[WorkerError]]:
        """Reports queued since the last poll, whether training ended, and its error
        (typed here, where the raw exception is at hand).

        Waits up to ``timeout`` for something to happen, so the driver's loop is a long
        poll that costs nothing while training runs.
        """
        session = self._session
        if session is None:
            return [], False, None
        if self._done:
            return [], True, self._error
        items, done = session.drain(timeout)
        if done:
            self._done = True
            if session.error is not None:
                self._error = worker_raised(session.context.world_rank, session._node_ip,
                                            session.error, session.traceback_str)
        return items, self._done, self._error

    def timeline(self) -> List[Tuple[str, float]]:
        """This worker's timeline marks of the current attempt (``timeline.mark``)."""
        return timeline.marks()

    def train_stack(self, limit: int = 8) -> str:
        """Where the train thread is right now (its innermost ``limit`` frames), for
        diagnosing a hang; empty when it is not running."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return ""
        frame = sys._current_frames().get(thread.ident)
        if frame is None:
            return ""
        frames = traceback.extract_stack(frame)
        # Start at the user's train_func: the frames above it are the engine's own.
        for i, fs in enumerate(frames):
            if fs.name == "_call_train_func" and fs.filename == __file__:
                frames = frames[i + 1:]
                break
        if len(frames) <= limit:
            return "".join(traceback.format_list(frames))
        # The user's own frames first (where in train_func), then the innermost ones.
        head, tail = frames[:3], frames[-(limit - 3):]
        return ("".join(traceback.format_list(head)) + "  ...\n"
                + "".join(traceback.format_list(tail)))

    def reset(self) -> Optional[str]:
        """Before this process serves another fit or trial (the worker pool): drop the
        last run's session and thread, then undo what it left in the process. None
        when clean, else why not (the pool stops the worker then)."""
        self._session, self._thread = None, None
        _session.shutdown_session()
        return worker_reset.reset_process()

    def shutdown(self) -> None:
        _session.shutdown_session()
