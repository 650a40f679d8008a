"""From what the workers said to the message a user reads.

The worker reports what ``train_func`` raised as a ``UserCodeError`` or a
``CollectiveTimeoutError``, the worker group a gone process as a ``WorkerDiedError``,
the controller a silent group as a ``WorkerHealthCheckError`` and a stalled one as a
``CollectiveTimeoutError``. Every text a user sees about a failed worker is written
here, once; ``FailurePolicy`` decides on the types alone, never on these texts.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, Iterable, Optional, Set

from engine import constants
from engine.exceptions import (CollectiveTimeoutError, UserCodeError, WorkerDiedError,
                               WorkerError, WorkerHealthCheckError)

# How a collective that ran past its timeout fails: gloo, torch's DistBackendError,
# NCCL's watchdog, TensorFlow's collective ops. The only place a message is matched: it
# decides which type a worker's raw exception becomes, nothing downstream reads text.
_COLLECTIVE_TIMEOUT = re.compile(
    r"Timed out waiting|DistBackendError|collective operation timeout|"
    r"DEADLINE_EXCEEDED|Collective ops is aborted", re.IGNORECASE)

# How long one rank may take to say where it is: a diagnosis must not hang itself.
STACK_TIMEOUT_S = 5.0

StacksOf = Callable[[Iterable[int]], Dict[int, str]]


def health_check_timeout() -> float:
    """How long a poll may find every rank silent (``TRAINYARD_HEALTH_CHECK_TIMEOUT_S``)."""
    return constants.get(constants.HEALTH_CHECK_TIMEOUT_ENV_VAR)


# --- the typed errors, as the workers, the group and the controller report them ------
def worker_raised(rank: int, node: str, exc: BaseException, traceback_str: str
                  ) -> WorkerError:
    """What ``train_func`` raised on ``rank``: a ``CollectiveTimeoutError`` when it is a
    collective that ran past its timeout, else a ``UserCodeError``."""
    summary = f"{type(exc).__name__}: {exc}"
    timed_out = _COLLECTIVE_TIMEOUT.search(summary + "\n" + traceback_str)
    cls = CollectiveTimeoutError if timed_out else UserCodeError
    return cls(rank, summary, traceback_str, node)


def worker_died(rank: int, node: str, cause: str) -> WorkerDiedError:
    """Rank ``rank``'s process is gone; ``cause`` is Ray's error type."""
    return WorkerDiedError(rank, "the worker process died (killed, e.g. by SIGKILL or the "
                                 f"OOM killer, or crashed): {cause}", node=node)


def health_check_failed(timeout_s: float) -> WorkerHealthCheckError:
    """No rank answered a poll within ``timeout_s``."""
    return WorkerHealthCheckError(
        -1, f"no worker answered a health check in {timeout_s:.0f} s (hung in C code "
            f"holding the GIL?); raise {constants.HEALTH_CHECK_TIMEOUT_ENV_VAR} if "
            "that is expected")


def stalled(limit_s: float, config_name: str, stacks: Dict[int, str]
            ) -> CollectiveTimeoutError:
    """The backend's watchdog fired: no rank reported for ``limit_s``; ``stacks`` holds
    where each unfinished rank was."""
    where = [f"rank {rank} was at:\n{stack.rstrip() or '  (no stack)'}"
             for rank, stack in sorted(stacks.items())]
    return CollectiveTimeoutError(-1, "\n\n".join(
        [f"no rank reported for {limit_s:g} s ({config_name}(timeout_s={limit_s:g})): the "
         "worker group is hung, e.g. in a collective that a rank never entered. Raise "
         f"{config_name}(timeout_s=...) if an interval between reports can be that long."]
        + where))


# --- the error a failed poll reports ------------------------------------------------
def diagnose(failure: WorkerError, dead: Optional[WorkerError], waiting: Set[int],
             world_size: int, stacks_of: StacksOf) -> WorkerError:
    """The error worth reporting for a poll in which ``failure`` came first.

    Args:
        failure: The first error of the poll (lowest rank).
        dead: A rank found dead while the healthy ranks were drained, if any.
        waiting: The ranks that raised (in a collective, for a timeout).
        world_size: The number of ranks.
        stacks_of: Where the given ranks are now (only asked when needed).
    """
    if dead is not None and not isinstance(failure, WorkerDiedError):
        # A rank's process died and its peers' collectives then broke: the death is
        # the cause worth reporting, the peers' errors are its echo.
        return WorkerDiedError(dead.rank, f"{dead.message}; other ranks then failed: "
                                          f"{first_line(failure)}", node=dead.node)
    if dead is None and isinstance(failure, CollectiveTimeoutError):
        return _collective_timeout(failure, waiting, world_size, stacks_of)
    return failure


def _collective_timeout(failure: CollectiveTimeoutError, waiting: Set[int],
                        world_size: int, stacks_of: StacksOf) -> WorkerError:
    """Name the ranks that waited in the collective and those that never arrived (alive,
    no error), with where each of those was."""
    missing = [r for r in range(world_size) if r not in waiting]
    if not missing:
        return failure
    stacks = stacks_of(missing)
    where = [f"rank {rank} was at:\n{stacks[rank].rstrip()}"
             for rank in missing if stacks.get(rank)]
    text = (f"collective timed out: rank{'s' if len(waiting) > 1 else ''} "
            f"{_ranks(waiting)} waited in it past the backend timeout "
            f"(e.g. TorchConfig.timeout_s); rank{'s' if len(missing) > 1 else ''} "
            f"{_ranks(missing)} never arrived")
    detail = "\n\n".join([f"{text}. First error: {failure.message}"] + where)
    return CollectiveTimeoutError(failure.rank, detail, failure.traceback_str, failure.node)


def capture_stacks(group: Any, ranks: Iterable[int]) -> Dict[int, str]:
    """Where each rank's train thread is now (``TrainWorker.train_stack``); "" for a rank
    that cannot say, since a diagnosis must not hide the failure it explains."""
    stacks = {}
    for rank in ranks:
        try:
            stacks[rank] = group.worker_call(rank, "train_stack", timeout=STACK_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - see the docstring
            stacks[rank] = ""
    return stacks


def first_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _ranks(ranks: Iterable[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))
