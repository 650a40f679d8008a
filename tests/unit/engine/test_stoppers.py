"""Each stopper's semantics (Ray Tune's), RunConfig(stop=...) validation, and stopping
a single fit() through the controller (scripted fake worker group, no Ray)."""

from __future__ import annotations

import datetime
import time

import pytest

from engine import ConfigError, RunConfig, ScalingConfig, TrainingFailedError
from engine._internal.execution.controller import Controller, RunSpec, RunState
from engine._internal.execution.stopping import DictStopper, StopCheck, StopperError, make_stopper
from engine._internal.worker_group.backend import BackendConfig
from engine._internal.worker_group.group import PollResult
from engine.tune.stopper import (CombinedStopper, ExperimentPlateauStopper,
                                 FunctionStopper, MaximumIterationStopper, Stopper,
                                 TimeoutStopper, TrialPlateauStopper)
from tests.support.fakes import FakeWorkerGroup, item


def test_maximum_iteration_counts_results_per_trial():
    s = MaximumIterationStopper(3)
    assert [s("a", {}) for _ in range(2)] == [False, False]
    assert s("b", {}) is False
    assert s("a", {}) is True
    assert s.stop_all() is False


def test_trial_plateau_waits_for_grace_and_num_results_then_checks_std():
    s = TrialPlateauStopper("loss", std=0.01, num_results=3, grace_period=4)
    assert [s("t", {"loss": 1.0}) for _ in range(3)] == [False] * 3  # grace period
    assert s("t", {"loss": 1.0}) is True
    noisy = TrialPlateauStopper("loss", std=0.01, num_results=3, grace_period=0)
    assert [noisy("t", {"loss": v}) for v in (1.0, 2.0, 3.0, 3.0)] == [False] * 4
    assert noisy("t", {"loss": 3.0}) is True  # last three: 3, 3, 3


def test_trial_plateau_threshold_and_missing_metric():
    s = TrialPlateauStopper("acc", num_results=2, grace_period=0, metric_threshold=0.9,
                            mode="max")
    assert [s("t", {"acc": 0.5}) for _ in range(3)] == [False] * 3  # flat but too low
    assert s("t", {"acc": 0.95}) is False and s("t", {"acc": 0.95}) is True
    missing = TrialPlateauStopper("acc", num_results=2, grace_period=0)
    assert [missing("t", {}) for _ in range(3)] == [False] * 3
    with pytest.raises(ConfigError, match="mode"):
        TrialPlateauStopper("acc", metric_threshold=0.9)
    with pytest.raises(ConfigError, match="num_results"):
        TrialPlateauStopper("acc", num_results=1)


def test_experiment_plateau_over_all_trials_with_patience():
    # Ray counts the result that reaches the plateau as the first of `patience`.
    assert ExperimentPlateauStopper("loss", top=1, patience=1)("a", {"loss": 1}) is True
    s = ExperimentPlateauStopper("loss", std=0.001, top=2, mode="min", patience=2)
    assert s("a", {"loss": 0.5}) is False
    assert s("b", {"loss": 0.5}) is False  # plateau reached: 1 of 2
    assert s.has_plateaued() and not s.stop_all()
    assert s("a", {"loss": 0.9}) is True  # top two still 0.5, 0.5
    assert s.stop_all() is True
    with pytest.raises(ConfigError, match="mode"):
        ExperimentPlateauStopper("loss", mode="best")


def test_timeout_counts_from_first_check_and_takes_timedelta(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    s = TimeoutStopper(datetime.timedelta(seconds=10))
    clock[0] = 500.0  # built long ago: the budget starts at the first check
    assert s.stop_all() is False and s("t", {}) is False
    clock[0] = 509.0
    assert s.stop_all() is False
    clock[0] = 510.5
    assert s.stop_all() is True
    with pytest.raises(ConfigError, match="timeout"):
        TimeoutStopper("10s")


def test_combined_and_function_and_subclass():
    class Over(Stopper):
        def __call__(self, trial_id, result):
            return result["x"] > 5

        def stop_all(self):
            return False

    s = CombinedStopper(Over(), FunctionStopper(lambda tid, r: r["x"] == 2))
    assert [s("t", {"x": v}) for v in (1, 2, 3, 6)] == [False, True, False, True]
    assert CombinedStopper(MaximumIterationStopper(1), TimeoutStopper(1e6)).stop_all() is False
    with pytest.raises(ConfigError, match="Stopper"):
        CombinedStopper(lambda t, r: True)


def test_dict_stops_when_any_metric_reaches_its_value():
    s = DictStopper({"training_iteration": 5, "acc": 0.9})
    assert s("t", {"training_iteration": 1, "acc": 0.5}) is False
    assert s("t", {"training_iteration": 2, "acc": 0.9}) is True
    assert s("t", {"training_iteration": 5, "acc": 0.1}) is True
    nested = DictStopper({"val/acc": 0.9})
    assert nested("t", {"val": {"acc": 0.95}}) is True


def test_dict_unknown_key_is_a_clear_error():
    with pytest.raises(StopperError, match="'acuracy'.*not in the reported metrics"):
        DictStopper({"acuracy": 0.9})("t", {"accuracy": 0.5, "training_iteration": 1})


def test_stopper_that_raises_is_named():
    class Broken(Stopper):
        def __call__(self, trial_id, result):
            raise KeyError("nope")

    with pytest.raises(StopperError, match="Broken.*KeyError"):
        StopCheck(Broken()).trial("t", {})


@pytest.mark.parametrize("stop, match", [
    ({"acc": "high"}, "must be a number"), ({"a": {"b": 1}}, "flat metric names"),
    (42, "Stopper"), (MaximumIterationStopper, "passes the class")])
def test_run_config_rejects_bad_stop(stop, match):
    with pytest.raises(ConfigError, match=match):
        RunConfig(stop=stop)


def test_make_stopper_kinds():
    assert make_stopper(None) is None and make_stopper({}) is None
    m = MaximumIterationStopper(2)
    assert make_stopper(m) is m
    assert isinstance(make_stopper(lambda t, r: False), FunctionStopper)


# --- a single fit() through the controller --------------------------------------------
def _rounds(n, **metrics):
    return [[PollResult(0, [item(i, rank=0, **metrics, acc=i / 10)])] for i in range(1, n + 1)]


def _controller(tmp_path, stop, script):
    spec = RunSpec(train_func=lambda: None, train_loop_config={},
                   scaling_config=ScalingConfig(num_workers=1),
                   run_config=RunConfig(storage_path=str(tmp_path), verbose=0, stop=stop),
                   backend_config=BackendConfig())
    return Controller(spec, worker_group_cls=FakeWorkerGroup.scripted([script]))


@pytest.mark.parametrize("stop", [
    {"acc": 0.3}, lambda trial_id, result: result["acc"] >= 0.3,
    MaximumIterationStopper(3)])
def test_fit_stops_as_finished(tmp_path, stop):
    controller = _controller(tmp_path, stop, _rounds(8))
    result = controller.run()
    assert controller.state is RunState.FINISHED
    assert result.metrics["training_iteration"] == 3 and result.error is None


def test_fit_with_unknown_stop_key_fails_clearly(tmp_path):
    controller = _controller(tmp_path, {"accuracy": 0.9}, _rounds(3))
    with pytest.raises(TrainingFailedError, match="'accuracy'.*not in the reported"):
        controller.run()
    assert controller.state is RunState.ERRORED
