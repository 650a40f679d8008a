"""The controller's state machine, driven by a scripted fake worker group (no Ray)."""

from __future__ import annotations

import json
import os

import pytest

from engine import RunConfig, ScalingConfig, TrainingFailedError
from engine._internal.execution.controller import Controller, RunSpec, RunState
from engine._internal.worker_group.backend import BackendConfig
from engine._internal.worker_group.group import PollResult
from engine._internal.worker_group.session import ReportItem
from engine.callbacks import Callback
from tests.support.fakes import FakeWorkerGroup, both, died, done, item, raised, run


class Recorder(Callback):
    def __init__(self):
        self.events = []

    def on_report(self, metrics, all_metrics):
        self.events.append(("report", metrics["training_iteration"],
                            [m["rank"] for m in all_metrics]))

    def on_failure(self, error):
        self.events.append(("failure", type(error).__name__))

    def on_retry(self, attempt):
        self.events.append(("retry", attempt))


def test_happy_path_states_and_result(tmp_path):
    rec = Recorder()
    controller, states = run(tmp_path, [[both(1, x=1), both(2, x=2), done()]], callbacks=[rec])
    result = controller.run()
    assert states == [RunState.INITIALIZING, RunState.SCHEDULING, RunState.RUNNING,
                      RunState.RUNNING, RunState.RUNNING]
    assert controller.state is RunState.FINISHED
    assert result.metrics["x"] == 2 and result.metrics["rank"] == 0
    assert result.metrics["done"] is True and result.metrics["config"] == {"k": 1}
    assert ("report", 2, [0, 1]) in rec.events


def test_rounds_wait_for_every_rank(tmp_path):
    rec = Recorder()
    script = [[PollResult(0, [item(1, rank=0), item(2, rank=0)])],
              [PollResult(1, [item(1, rank=1)])],
              [PollResult(1, [item(2, rank=1)])], done()]
    run_ = run(tmp_path, [script], callbacks=[rec])[0]
    run_.run()
    assert [e[1] for e in rec.events if e[0] == "report"] == [1, 2]


def test_worker_death_retries_then_finishes(tmp_path):
    rec = Recorder()
    first = [both(1, x=1), [died(1)]]
    second = [both(2, x=2), done()]
    controller, states = run(tmp_path, [first, second], max_failures=1, callbacks=[rec])
    result = controller.run()
    assert RunState.RESTARTING in states
    assert states.count(RunState.SCHEDULING) == 2
    assert result.num_failures == 1 and result.metrics["x"] == 2
    assert ("failure", "WorkerDiedError") in rec.events and ("retry", 1) in rec.events


def test_retries_exhausted_raise_with_partial_result(tmp_path):
    first = [both(1, x=1), [raised(1, ValueError("boom"), "Traceback ...")]]
    controller, _ = run(tmp_path, [first], max_failures=0)
    with pytest.raises(TrainingFailedError, match="rank 1.*ValueError: boom") as info:
        controller.run()
    assert controller.state is RunState.ERRORED
    assert info.value.result.metrics["x"] == 1


def test_uneven_reports_are_not_retried(tmp_path):
    script = [[PollResult(0, [item(1, rank=0), item(2, rank=0)]),
               PollResult(1, [item(1, rank=1)], finished=True)]]
    controller, _ = run(tmp_path, [script, script], max_failures=3)
    with pytest.raises(TrainingFailedError, match="same number of times"):
        controller.run()
    assert len(controller.worker_group_cls.started) == 1


def test_silent_workers_fail_the_health_check(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINYARD_HEALTH_CHECK_TIMEOUT_S", "0.01")
    controller, _ = run(tmp_path, [[]], max_failures=0)
    with pytest.raises(TrainingFailedError, match="health check"):
        controller.run()


def test_forever_retries_with_minus_one(tmp_path):
    dead = [[died(0)]]
    attempts = [list(dead) for _ in range(5)] + [[both(1, x=9), done()]]
    controller, _ = run(tmp_path, attempts, max_failures=-1)
    assert controller.run().num_failures == 5


def test_a_dead_rank_is_blamed_over_its_peers_broken_collective(tmp_path):
    script = [both(1, x=1),
              [raised(0, RuntimeError("gloo connection reset"))],
              [died(1)]]
    controller, _ = run(tmp_path, [script], max_failures=0)
    with pytest.raises(TrainingFailedError, match=r"rank 1.*died.*gloo connection reset"):
        controller.run()


# --- the run record across a driver killed right after a commit ------------------------
class DriverKilled(BaseException):
    """Stands for SIGKILL of the driver: nothing after it runs (no except catches it)."""


class KillDriverAfterCommit(Callback):
    def __init__(self, iteration):
        self.iteration = iteration

    def on_checkpoint(self, checkpoint, metrics):
        if metrics["training_iteration"] == self.iteration:
            raise DriverKilled


def staged(run_dir, iteration, rank):
    """A report with a checkpoint file this rank staged, as the session writes it."""
    staging = os.path.join(run_dir, ".staging", f"001_{iteration:06d}", f"rank_{rank}")
    os.makedirs(staging)
    with open(os.path.join(staging, f"w{rank}.txt"), "w") as f:
        f.write(str(iteration))
    return ReportItem(iteration, {"training_iteration": iteration, "rank": rank},
                      checkpoint_staging=staging, checkpoint_files=[f"w{rank}.txt"])


def rounds_with_checkpoints(run_dir, *iterations):
    """One poll answer per round; files are staged when polled (the controller clears
    the staging area when it starts)."""
    return [lambda i=i: [PollResult(r, [staged(run_dir, i, r)]) for r in (0, 1)]
            for i in iterations]


def fit_named(tmp_path, group, callbacks=()):
    spec = RunSpec(train_func=lambda: None, train_loop_config={},
                   scaling_config=ScalingConfig(num_workers=2),
                   run_config=RunConfig(name="run", storage_path=str(tmp_path), verbose=0,
                                        callbacks=list(callbacks)),
                   backend_config=BackendConfig())
    return Controller(spec, worker_group_cls=group).run()


def test_a_driver_killed_after_a_commit_keeps_that_round(tmp_path):
    run_dir = str(tmp_path / "run")
    first = FakeWorkerGroup.scripted([rounds_with_checkpoints(run_dir, 1, 2, 3)])
    with pytest.raises(DriverKilled):
        fit_named(tmp_path, first, [KillDriverAfterCommit(2)])
    record = json.load(open(os.path.join(run_dir, "run_state.json")))
    assert record["state"] == "RUNNING"
    assert [h["training_iteration"] for h in record["history"]] == [1, 2]
    # fit() again resumes after the checkpoint of round 2, and keeps round 2's row.
    second = FakeWorkerGroup.scripted([rounds_with_checkpoints(run_dir, 3) + [done()]])
    result = fit_named(tmp_path, second)
    assert second.started[0].session_args[0]["start_iteration"] == 2
    assert list(result.metrics_dataframe["training_iteration"]) == [1, 2, 3]
    assert result.checkpoint.path.endswith("checkpoint_000002")


def test_a_round_an_older_record_lost_is_rebuilt_from_its_commit_marker(tmp_path):
    run_dir = str(tmp_path / "run")
    first = FakeWorkerGroup.scripted([rounds_with_checkpoints(run_dir, 1, 2, 3)])
    with pytest.raises(DriverKilled):
        fit_named(tmp_path, first, [KillDriverAfterCommit(2)])
    # What earlier versions left: checkpoint 2 in the record, its round not.
    path = os.path.join(run_dir, "run_state.json")
    record = json.load(open(path))
    del record["history"][-1], record["worker_history"][-1]
    json.dump(record, open(path, "w"))
    second = FakeWorkerGroup.scripted([rounds_with_checkpoints(run_dir, 3) + [done()]])
    result = fit_named(tmp_path, second)
    assert list(result.metrics_dataframe["training_iteration"]) == [1, 2, 3]
    assert result.history[1]["rank"] == 0  # rank 0's metrics, from the marker


def test_a_checkpoint_registered_without_its_marker_is_dropped_and_its_number_reused(
        tmp_path):
    run_dir = str(tmp_path / "run")
    first = FakeWorkerGroup.scripted([rounds_with_checkpoints(run_dir, 1, 2, 3)])
    with pytest.raises(DriverKilled):
        fit_named(tmp_path, first, [KillDriverAfterCommit(2)])
    # The driver died after saving the record with checkpoint 1, before its marker.
    os.remove(os.path.join(run_dir, "checkpoint_000001", ".trainyard_committed"))
    second = FakeWorkerGroup.scripted([rounds_with_checkpoints(run_dir, 2, 3) + [done()]])
    result = fit_named(tmp_path, second)
    assert second.started[0].session_args[0]["start_iteration"] == 1
    assert list(result.metrics_dataframe["training_iteration"]) == [1, 2, 3]
    names = sorted(n for n in os.listdir(run_dir) if n.startswith("checkpoint_"))
    assert names == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]
    record = json.load(open(os.path.join(run_dir, "run_state.json")))
    assert record["last_restore"]["checkpoint"] == "checkpoint_000000"
