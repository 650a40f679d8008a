"""Retry or raise: the controller's one decision about a failure, made on its type."""

from __future__ import annotations

import enum

from engine.exceptions import TrainyardError


class FailureDecision(enum.Enum):
    RETRY = "RETRY"
    RAISE = "RAISE"


class FatalError(TrainyardError):
    """A failure a retry cannot fix: every attempt would fail the same way (e.g. ranks
    that call report() a different number of times)."""


# Every WorkerError subclass (a lost process or node, a hang, a transient error in
# train_func such as a flaky download) and any error starting a group may not happen
# again in a new worker group, so they are retried while the budget lasts; these never.
NEVER_RETRIED = (FatalError,)


class FailurePolicy:
    """Retry while ``FailureConfig.max_failures`` allows (-1: forever)."""

    def __init__(self, max_failures: int) -> None:
        self.max_failures = max_failures

    def make_decision(self, error: BaseException, failures_so_far: int) -> FailureDecision:
        """Whether the run restarts its worker group after ``error``.

        Args:
            error: What ended the attempt (a typed ``WorkerError`` for a worker's failure).
            failures_so_far: Restarts already made in this run.
        """
        if isinstance(error, NEVER_RETRIED):
            return FailureDecision.RAISE
        if self.max_failures == -1 or failures_so_far < self.max_failures:
            return FailureDecision.RETRY
        return FailureDecision.RAISE
