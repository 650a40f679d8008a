"""The controller's ``decide`` hook (what a Tuner uses to stop, pause or restart a trial),
driven by a scripted fake worker group (no Ray)."""

from __future__ import annotations

import dataclasses
import json
import os
from engine import Checkpoint, RunConfig, ScalingConfig
from engine._internal.execution.controller import (Controller, RunSpec, TrialAction,
                                         TrialDecision)
from engine._internal.worker_group.backend import BackendConfig
from engine._internal.worker_group.group import PollResult
from engine._internal.worker_group.session import ReportItem
from tests.support.fakes import FakeWorkerGroup


def rounds(*iterations, finished=False):
    out = [[PollResult(0, [ReportItem(i, {"i": i, "training_iteration": i})])]
           for i in iterations]
    if finished:
        out.append([PollResult(0, [], True)])
    return out


def make(tmp_path, group, decide, name="trial"):
    spec = RunSpec(train_func=lambda c: None, train_loop_config={"lr": 1},
                   scaling_config=ScalingConfig(num_workers=1),
                   run_config=RunConfig(name=name, storage_path=str(tmp_path), verbose=0),
                   backend_config=BackendConfig(),
                   trial_info={"trial_id": "abc_00007", "experiment_tag": "7_lr=1"})
    return Controller(spec, worker_group_cls=group, decide=decide)


def state(tmp_path, name="trial"):
    with open(os.path.join(tmp_path, name, "run_state.json")) as f:
        return json.load(f)


def test_stop_ends_the_run_finished_at_that_round(tmp_path):
    seen = []

    def decide(metrics):
        seen.append(None if metrics is None else metrics["i"])
        if metrics and metrics["i"] == 2:
            return TrialDecision(TrialAction.STOP)
        return None

    # Rounds 2 and 3 arrive in one poll: the rounds after the decision are dropped.
    script = [rounds(1)[0], rounds(2)[0] + [PollResult(0, [ReportItem(3, {"i": 3})])]]
    group = FakeWorkerGroup.scripted([script])
    result = make(tmp_path, group, decide).run()
    assert result.metrics["i"] == 2 and result.metrics["done"] is True
    assert result.metrics["trial_id"] == "abc_00007"
    assert result.metrics["experiment_tag"] == "7_lr=1"
    assert [h["i"] for h in result.history] == [1, 2]
    assert group.started[0].shut == "killed"  # still training: not a clean exit
    assert state(tmp_path)["state"] == "FINISHED"
    assert seen == [1, None, 2]  # after each round, and once per poll


def test_pause_leaves_the_run_resumable(tmp_path):
    decide = lambda m: TrialDecision(TrialAction.PAUSE) if m and m["i"] == 1 else None  # noqa
    make(tmp_path, FakeWorkerGroup.scripted([rounds(1, 2)]), decide).run()
    assert state(tmp_path)["state"] == "RUNNING"
    # Running it again trains on (from its latest checkpoint; here it has none).
    group = FakeWorkerGroup.scripted([rounds(1, finished=True)])
    result = make(tmp_path, group, lambda m: None).run()
    assert len(group.started) == 1 and [h["i"] for h in result.history] == [1]
    assert state(tmp_path)["state"] == "FINISHED"


def test_restart_adopts_the_checkpoint_and_the_new_config(tmp_path):
    donor = Checkpoint.from_dict({"weights": 42})
    donor.metrics = {"score": 9}

    group = FakeWorkerGroup.scripted([rounds(1, 2), rounds(3, finished=True)])

    def decide(metrics):
        if metrics and metrics["i"] == 2 and len(group.started) == 1:
            return TrialDecision(TrialAction.RESTART, config={"lr": 5}, checkpoint=donor,
                                 trial_info={"experiment_tag": "7_lr=5@perturbed[lr=5]"})
        return None

    controller = make(tmp_path, group, decide)
    result = controller.run()
    first, second = group.started
    assert first.shut == "killed" and second.config == {"lr": 5}
    start_ckpt = second.session_args[0]["checkpoint"]
    assert start_ckpt.to_dict() == {"weights": 42}
    assert start_ckpt.path.endswith("checkpoint_000000")
    assert second.session_args[0]["start_iteration"] == 2  # numbering goes on
    assert not os.path.exists(donor.path)  # the temporary copy was consumed
    assert [h["i"] for h in result.history] == [1, 2, 3]
    assert [h["experiment_tag"] for h in result.history] == [
        "7_lr=1", "7_lr=1", "7_lr=5@perturbed[lr=5]"]
    assert result.config == {"lr": 5} and result.num_failures == 0
    assert result.checkpoint.to_dict() == {"weights": 42}
    marker = json.load(open(os.path.join(result.checkpoint.path, ".trainyard_committed")))
    assert marker["iteration"] == 2
    assert state(tmp_path)["config"] == {"lr": 5}


def test_an_adopted_checkpoint_is_the_runs_own_copy_for_its_trial_and_callbacks(tmp_path):
    """A PBT donor's retention may delete the checkpoint a trial restarted from: the
    trial (which may be a donor next) must point at its own committed copy."""
    from engine.callbacks import Callback

    class Seen(Callback):
        def __init__(self):
            self.paths = []

        def on_checkpoint(self, checkpoint, metrics):
            self.paths.append((checkpoint.path, metrics.get("training_iteration")))

    donor = Checkpoint.from_dict({"weights": 42})
    donor.metrics = {"training_iteration": 1}
    group = FakeWorkerGroup.scripted([rounds(1, 2), rounds(2, finished=True)])

    def decide(metrics):
        if metrics and metrics["i"] == 2 and len(group.started) == 1:
            return TrialDecision(TrialAction.RESTART, config={"lr": 5}, checkpoint=donor)
        return None

    seen = Seen()
    spec = RunSpec(train_func=lambda c: None, train_loop_config={"lr": 1},
                   scaling_config=ScalingConfig(num_workers=1),
                   run_config=RunConfig(name="trial", storage_path=str(tmp_path), verbose=0,
                                        callbacks=[seen]),
                   backend_config=BackendConfig(), trial_info={"trial_id": "abc_00007"})
    controller = Controller(spec, worker_group_cls=group, decide=decide)
    controller.run()
    own = os.path.join(str(tmp_path), "trial", "checkpoint_000000")
    # The tuner's trial follows on_checkpoint too (tune._loop._TrialObserver).
    assert seen.paths == [(own, 1)]

    # A paused trial resumed with an exploit (synchronous PBT) adopts at its start.
    donor = Checkpoint.from_dict({"weights": 7})
    donor.metrics = {"training_iteration": 2}
    seen.paths.clear()
    spec.adopt_checkpoint = donor
    spec.run_config = dataclasses.replace(spec.run_config, name="paused")
    Controller(spec, worker_group_cls=FakeWorkerGroup.scripted(
        [rounds(3, finished=True)])).run()
    assert seen.paths == [(os.path.join(str(tmp_path), "paused", "checkpoint_000000"), 2)]


def test_restart_goes_on_from_the_donor_checkpoints_iteration(tmp_path):
    donor = Checkpoint.from_dict({"weights": 42})
    donor.metrics = {"score": 9, "training_iteration": 1}
    group = FakeWorkerGroup.scripted([rounds(1, 2, 3), rounds(2, finished=True)])

    def decide(metrics):
        if metrics and metrics["i"] == 3 and len(group.started) == 1:
            return TrialDecision(TrialAction.RESTART, config={"lr": 5}, checkpoint=donor)
        return None

    result = make(tmp_path, group, decide).run()
    second = group.started[1]
    assert second.session_args[0]["start_iteration"] == 1  # the donor's, not 3
    # The trial's own rounds stay its history; training goes on after the donor's.
    assert [h["i"] for h in result.history] == [1, 2, 3, 2]
    marker = json.load(open(os.path.join(result.checkpoint.path, ".trainyard_committed")))
    assert marker["iteration"] == 1


def _deferred(group, at, calls):
    donor = Checkpoint.from_dict({"weights": 1})
    donor.metrics = {"training_iteration": at}

    def prepare():
        calls.append("prepare")
        return TrialDecision(TrialAction.RESTART, config={"lr": 5}, checkpoint=donor)

    def decide(metrics):
        if metrics and metrics["i"] == at and len(group.started) == 1:
            return TrialDecision(TrialAction.RESTART, prepare=prepare,
                                 cancel=lambda: calls.append("cancel"))
        return None
    return decide


def test_an_exploit_at_the_final_report_is_dropped(tmp_path):
    calls = []
    group = FakeWorkerGroup.scripted([rounds(1, 2, finished=True)])
    result = make(tmp_path, group, _deferred(group, 2, calls)).run()
    assert calls == ["cancel"] and len(group.started) == 1
    assert [h["i"] for h in result.history] == [1, 2]
    assert result.metrics["done"] is True and result.config == {"lr": 1}


def test_an_exploit_is_applied_once_the_trial_reports_again(tmp_path):
    calls = []
    group = FakeWorkerGroup.scripted([rounds(1, 2, 3), rounds(3, finished=True)])
    result = make(tmp_path, group, _deferred(group, 2, calls)).run()
    assert calls == ["prepare"] and len(group.started) == 2
    # Round 3 of the first attempt came after the decision: dropped with the group.
    assert [h["i"] for h in result.history] == [1, 2, 3]
    assert group.started[1].config == {"lr": 5}


def test_a_deferred_decision_that_comes_to_nothing_keeps_the_later_rounds(tmp_path):
    calls = []

    def decide(metrics):
        if metrics and metrics["i"] == 2:
            return TrialDecision(TrialAction.PAUSE,
                                 prepare=lambda: calls.append("prepare"))  # -> None
        return None

    # Rounds 2 and 3 in one poll: 3 shows that 2 was not the last report.
    script = [rounds(1)[0], rounds(2)[0] + rounds(3)[0], [PollResult(0, [], True)]]
    group = FakeWorkerGroup.scripted([script])
    result = make(tmp_path, group, decide).run()
    assert calls == ["prepare"] and len(group.started) == 1
    assert [h["i"] for h in result.history] == [1, 2, 3]
    assert state(tmp_path)["state"] == "FINISHED"
