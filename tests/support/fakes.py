"""Test doubles shared by the test suites: a scripted worker group for driving the
controller without Ray, poll answers of each kind, and a callback that injects a real
fault (SIGKILL of a worker process)."""

from __future__ import annotations

import os
import signal
from typing import Any, Dict, List, Optional

from engine._internal.execution import failure_diagnosis
from engine._internal.worker_group.group import PollResult, WorkerMeta
from engine._internal.worker_group.session import ReportItem
from engine.callbacks import Callback

NODE = "127.0.0.1"


class FakeWorkerGroup:
    """Plays back scripted attempts instead of starting Ray actors: the i-th group
    started answers its polls with ``attempts[i]`` (a list of poll answers, each a list
    of ``PollResult`` or a function making one when polled), then with silence ([]:
    nobody answered).

    Get a class of your own per test with :meth:`scripted` and pass it as
    ``Controller(worker_group_cls=...)``; ``started`` lists the groups it made.
    """

    attempts: List[List[List[PollResult]]] = []
    started: List["FakeWorkerGroup"] = []
    stacks: Dict[int, str] = {}  # what train_stack answers, by rank

    @classmethod
    def scripted(cls, attempts: List[List[List[PollResult]]],
                 stacks: Optional[Dict[int, str]] = None) -> type:
        return type("ScriptedWorkerGroup", (cls,),
                    {"attempts": attempts, "started": [], "stacks": dict(stacks or {})})

    def __init__(self, scaling: Any, env: Optional[Dict[str, str]] = None,
                 needs_data_cpus: bool = False) -> None:
        n = scaling.num_workers
        self.scaling = scaling
        self.meta = [WorkerMeta("n", NODE, "h", 100 + r, [], world_rank=r, local_rank=r,
                                local_world_size=n) for r in range(n)]
        self.script = list(type(self).attempts[len(type(self).started)])
        type(self).started.append(self)
        self.shut: Optional[str] = None  # "graceful" or "killed" once shut down
        self.config: Any = None
        self.session_args: List[Dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.meta)

    def start(self) -> None:
        pass

    def check_storage(self, storage: Any) -> None:
        pass

    def start_training(self, train_func: Any, config: Any, session_args: List[Dict[str, Any]],
                       before_train: Any = None) -> None:
        assert [a["context"].world_rank for a in session_args] == list(range(len(self)))
        self.config, self.session_args = config, session_args

    def poll(self, timeout: float) -> List[PollResult]:
        answer = self.script.pop(0) if self.script else []
        return answer() if callable(answer) else answer

    def worker_call(self, rank: int, method: str, *args: Any, timeout: float = 10.0) -> Any:
        assert method == "train_stack", method
        return type(self).stacks.get(rank, "")

    def shutdown(self, graceful: bool = False) -> None:
        self.shut = "graceful" if graceful else "killed"


# --- poll answers ------------------------------------------------------------------
def item(iteration: int, **metrics: Any) -> ReportItem:
    """One report of ``metrics`` at ``iteration``."""
    return ReportItem(iteration, dict(metrics, training_iteration=iteration))


def died(rank: int) -> PollResult:
    """Rank ``rank``'s process is gone, as the worker group reports it."""
    return PollResult(rank, [], error=failure_diagnosis.worker_died(rank, NODE,
                                                                     "ActorDiedError"))


def raised(rank: int, exc: BaseException, traceback_str: str = "tb") -> PollResult:
    """``train_func`` raised ``exc`` on rank ``rank``, as its worker reports it."""
    return PollResult(rank, [], True,
                      error=failure_diagnosis.worker_raised(rank, NODE, exc, traceback_str))


# --- real faults -------------------------------------------------------------------
class KillWorkerOnce(Callback):
    """SIGKILLs one rank's process (its reported pid) when a given round arrives."""

    def __init__(self, rank: int, at_iteration: int) -> None:
        self.rank, self.at_iteration = rank, at_iteration
        self.killed_pid = None
        self.retries = 0

    def on_report(self, metrics, all_metrics):
        if self.killed_pid is None and metrics["training_iteration"] == self.at_iteration:
            self.killed_pid = all_metrics[self.rank]["pid"]
            os.kill(self.killed_pid, signal.SIGKILL)

    def on_retry(self, attempt):
        self.retries += 1


def both(iteration: int, finished: bool = False, **metrics: Any) -> List[PollResult]:
    """One poll of a two-rank group in which both ranks report ``iteration``."""
    return [PollResult(0, [item(iteration, rank=0, **metrics)], finished),
            PollResult(1, [item(iteration, rank=1, **metrics)], finished)]


def done() -> List[PollResult]:
    """One poll in which both ranks of a two-rank group have finished."""
    return [PollResult(0, [], True), PollResult(1, [], True)]


def run(tmp_path, attempts, max_failures: int = 0, callbacks=()):
    """A controller of a two-worker run over ``FakeWorkerGroup.scripted(attempts)``, and
    the list that records its state at each step."""
    from engine import FailureConfig, RunConfig, ScalingConfig
    from engine._internal.execution.controller import Controller, RunSpec
    from engine._internal.worker_group.backend import BackendConfig

    spec = RunSpec(train_func=lambda: None, train_loop_config={"k": 1},
                   scaling_config=ScalingConfig(num_workers=2),
                   run_config=RunConfig(storage_path=str(tmp_path), verbose=0,
                                        callbacks=list(callbacks),
                                        failure_config=FailureConfig(max_failures)),
                   backend_config=BackendConfig())
    controller = Controller(spec, worker_group_cls=FakeWorkerGroup.scripted(attempts))
    states = []
    original = controller._step

    def step():
        states.append(controller.state)
        return original()

    controller._step = step
    return controller, states
