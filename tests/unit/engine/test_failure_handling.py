"""Typed worker failures: what the policy decides on them, the messages users read, and
that they survive pickling (they cross from the worker actors to the driver)."""

from __future__ import annotations

import pickle

import pytest

from engine import FailureConfig, RunConfig, ScalingConfig, TrainingFailedError
from engine._internal.execution import failure_diagnosis as diagnosis
from engine._internal.execution.controller import Controller, RunSpec
from engine._internal.execution.failure_policy import FailureDecision, FailurePolicy, FatalError
from engine._internal.worker_group.backend import BackendConfig
from engine._internal.worker_group.group import PollResult
from engine.exceptions import (CollectiveTimeoutError, UserCodeError, WorkerDiedError,
                               WorkerError, WorkerHealthCheckError)
from tests.support.fakes import FakeWorkerGroup, item, raised

RETRY, RAISE = FailureDecision.RETRY, FailureDecision.RAISE
TYPED = [WorkerDiedError, WorkerHealthCheckError, CollectiveTimeoutError, UserCodeError]


# --- the policy decides on types -----------------------------------------------------
@pytest.mark.parametrize("cls", TYPED)
def test_worker_failures_are_retried_while_the_budget_lasts(cls):
    policy = FailurePolicy(max_failures=2)
    error = cls(1, "whatever it says")
    assert [policy.make_decision(error, n) for n in range(4)] == [RETRY, RETRY, RAISE, RAISE]
    assert FailurePolicy(-1).make_decision(error, 10_000) is RETRY
    assert FailurePolicy(0).make_decision(error, 0) is RAISE


def test_a_fatal_error_is_never_retried_whatever_its_text():
    policy = FailurePolicy(max_failures=-1)
    assert policy.make_decision(FatalError("the worker process died"), 0) is RAISE
    # ...and a retryable type is retried even when its text reads like a fatal one.
    echo = UserCodeError(0, "Workers called report() a different number of times")
    assert policy.make_decision(echo, 0) is RETRY


def test_an_error_starting_a_group_is_retried_like_a_worker_failure():
    assert FailurePolicy(1).make_decision(ConnectionError("gcs lost"), 0) is RETRY


# --- typed errors --------------------------------------------------------------------
@pytest.mark.parametrize("cls", TYPED)
def test_typed_errors_pickle_and_read_as_before(cls):
    error = cls(3, "ValueError: boom", "Traceback (most recent call last): ...", "10.0.0.7")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls and isinstance(back, WorkerError)
    assert (back.rank, back.message, back.traceback_str, back.node) == (
        3, "ValueError: boom", "Traceback (most recent call last): ...", "10.0.0.7")
    assert str(back) == ("Worker rank 3 failed: ValueError: boom\n\nRemote traceback "
                         "(rank 3):\nTraceback (most recent call last): ...")


def test_a_worker_error_without_node_keeps_its_old_signature():
    error = pickle.loads(pickle.dumps(WorkerError(1, "boom")))
    assert (error.rank, error.message, error.traceback_str, error.node) == (1, "boom", "", "")
    assert str(error) == "Worker rank 1 failed: boom"


@pytest.mark.parametrize("exc,cls", [
    (ValueError("boom"), UserCodeError),
    (RuntimeError("[gloo] Timed out waiting 5000ms for recv operation"),
     CollectiveTimeoutError),
    (RuntimeError("DEADLINE_EXCEEDED: Collective ops is aborted by: ..."),
     CollectiveTimeoutError),
])
def test_a_raised_exception_is_typed_by_what_it_is(exc, cls):
    error = diagnosis.worker_raised(1, "10.0.0.7", exc, "tb")
    assert type(error) is cls
    assert (error.rank, error.node, error.traceback_str) == (1, "10.0.0.7", "tb")
    assert error.message == f"{type(exc).__name__}: {exc}"


def test_a_timeout_named_only_in_the_traceback_is_a_collective_timeout():
    tb = "  File 'x.py', line 3, in f\ntorch.distributed.DistBackendError: NCCL ..."
    assert isinstance(diagnosis.worker_raised(0, "", RuntimeError("x"), tb),
                      CollectiveTimeoutError)


# --- the messages users read ----------------------------------------------------------
def test_messages_of_a_death_and_a_silent_group(monkeypatch):
    died = diagnosis.worker_died(1, "10.0.0.7", "ActorDiedError")
    assert str(died) == ("Worker rank 1 failed: the worker process died (killed, e.g. by "
                         "SIGKILL or the OOM killer, or crashed): ActorDiedError")
    assert died.node == "10.0.0.7"
    silent = diagnosis.health_check_failed(30.0)
    assert isinstance(silent, WorkerHealthCheckError) and silent.rank == -1
    assert silent.message == (
        "no worker answered a health check in 30 s (hung in C code holding the GIL?); "
        "raise TRAINYARD_HEALTH_CHECK_TIMEOUT_S if that is expected")
    monkeypatch.setenv("TRAINYARD_HEALTH_CHECK_TIMEOUT_S", "2.5")
    assert diagnosis.health_check_timeout() == 2.5


def test_a_death_is_blamed_over_its_peers_echo():
    dead = diagnosis.worker_died(1, "n1", "ActorDiedError")
    echo = diagnosis.worker_raised(0, "n0", RuntimeError("gloo connection reset"), "tb")
    error = diagnosis.diagnose(echo, dead, {0}, 2, lambda ranks: {})
    assert isinstance(error, WorkerDiedError) and (error.rank, error.node) == (1, "n1")
    assert error.message == (
        "the worker process died (killed, e.g. by SIGKILL or the OOM killer, or crashed): "
        "ActorDiedError; other ranks then failed: Worker rank 0 failed: RuntimeError: "
        "gloo connection reset")


def test_a_collective_timeout_names_who_waited_and_who_never_arrived():
    first = diagnosis.worker_raised(0, "n0", RuntimeError("Timed out waiting 5000ms"), "tb")
    asked = []

    def stacks_of(ranks):
        asked.extend(ranks)
        return {2: "  File 'f.py', line 9, in train\n    time.sleep(120)\n", 3: ""}

    error = diagnosis.diagnose(first, None, {0, 1}, 4, stacks_of)
    assert asked == [2, 3]  # only the ranks that never arrived are asked
    assert isinstance(error, CollectiveTimeoutError) and error.traceback_str == "tb"
    assert error.message == (
        "collective timed out: ranks 0, 1 waited in it past the backend timeout (e.g. "
        "TorchConfig.timeout_s); ranks 2, 3 never arrived. First error: RuntimeError: "
        "Timed out waiting 5000ms\n\nrank 2 was at:\n  File 'f.py', line 9, in train\n"
        "    time.sleep(120)")


def test_other_failures_are_reported_as_they_came():
    user = diagnosis.worker_raised(1, "n", ValueError("boom"), "tb")
    assert diagnosis.diagnose(user, None, {1}, 2, lambda ranks: {}) is user
    everyone = diagnosis.worker_raised(0, "n", RuntimeError("Timed out waiting"), "tb")
    assert diagnosis.diagnose(everyone, None, {0, 1}, 2, lambda ranks: {}) is everyone


def test_a_stalled_group_says_where_every_rank_was():
    error = diagnosis.stalled(20, "TensorflowConfig", {1: "  at b\n", 0: ""})
    assert isinstance(error, CollectiveTimeoutError) and error.rank == -1
    assert error.message == (
        "no rank reported for 20 s (TensorflowConfig(timeout_s=20)): the worker group is "
        "hung, e.g. in a collective that a rank never entered. Raise "
        "TensorflowConfig(timeout_s=...) if an interval between reports can be that "
        "long.\n\nrank 0 was at:\n  (no stack)\n\nrank 1 was at:\n  at b")


def test_capture_stacks_never_hides_the_failure():
    class Group:
        def worker_call(self, rank, method, timeout):
            if rank == 1:
                raise TimeoutError("rank 1 does not answer")
            return f"stack of {rank}"

    assert diagnosis.capture_stacks(Group(), [0, 1]) == {0: "stack of 0", 1: ""}


# --- through the controller ----------------------------------------------------------
class _Stalling(BackendConfig):
    @property
    def stall_timeout_s(self):
        return 0.0  # the watchdog fires at the first poll


def _fit(tmp_path, attempts, backend=None, stacks=None, max_failures=0):
    group = FakeWorkerGroup.scripted(attempts, stacks)
    spec = RunSpec(train_func=lambda: None, train_loop_config={},
                   scaling_config=ScalingConfig(num_workers=2),
                   run_config=RunConfig(storage_path=str(tmp_path), verbose=0,
                                        failure_config=FailureConfig(max_failures)),
                   backend_config=backend or BackendConfig())
    with pytest.raises(TrainingFailedError) as info:
        Controller(spec, worker_group_cls=group).run()
    return info.value


def test_the_controller_reports_a_collective_timeout_with_the_missing_rank(tmp_path):
    timeout = raised(0, RuntimeError("[gloo] Timed out waiting 5000ms"))
    error = _fit(tmp_path, [[[timeout]]], stacks={1: "    time.sleep(120)\n"})
    assert isinstance(error.__cause__, CollectiveTimeoutError)
    assert "collective timed out: rank 0 waited in it past the backend timeout" in str(error)
    assert "rank 1 never arrived" in str(error)
    assert "rank 1 was at:\n    time.sleep(120)" in str(error)


def test_the_controller_reports_a_stall_from_the_backends_watchdog(tmp_path):
    reports = [PollResult(0, [item(1, rank=0)]), PollResult(1, [item(1, rank=1)])]
    error = _fit(tmp_path, [[reports]], backend=_Stalling(),
                 stacks={0: "  at a\n", 1: "  at b\n"})
    assert isinstance(error.__cause__, CollectiveTimeoutError)
    assert "no rank reported for 0 s (_Stalling(timeout_s=0))" in str(error)
    assert "rank 0 was at:\n  at a" in str(error) and "rank 1 was at:\n  at b" in str(error)


def test_the_controller_retries_a_silent_group_then_gives_up(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINYARD_HEALTH_CHECK_TIMEOUT_S", "0.01")
    error = _fit(tmp_path, [[], []], max_failures=1)
    assert isinstance(error.__cause__, WorkerHealthCheckError)
    assert error.result.num_failures == 1

