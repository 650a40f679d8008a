"""Ray Tune's class API (``engine.tune.Trainable``) on the session's Ray: checkpoints at
the frequency and the end the trial's CheckpointConfig asks for, a retry that restores
from the last one, and the schedulers that stop, pause or exploit trials (ASHA,
HyperBand, PBT with ``reset_config``)."""

from __future__ import annotations

import json
import os
import time

import pytest

from engine import CheckpointConfig, FailureConfig, RunConfig
from engine import tune
from engine.tune import TuneConfig, Tuner, grid_search
from engine.tune.schedulers import (ASHAScheduler, HyperBandScheduler,
                                    PopulationBasedTraining)

# Trials are tiny; they check results, not how workers start (tests/README.md).
pytestmark = pytest.mark.usefixtures("pooled_workers")


class Climb(tune.Trainable):
    """Climbs by ``config["lr"]`` per step; keeps its state as a dict checkpoint; notes
    each setup, restore and cleanup in ``config["log"]`` (a file per trial)."""

    def setup(self, config):
        self.value = 0.0
        self.lr = config["lr"]
        self._note("setup")

    def step(self):
        if self.config.get("fail_at") == self.iteration + 1 and not self._failed_before():
            self._note("fail")
            raise RuntimeError("a planned failure")
        self.value += self.lr
        time.sleep(self.config.get("delay", 0))
        return {"value": self.value, "lr": self.lr}

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}

    def load_checkpoint(self, checkpoint):
        self.value = checkpoint["value"]
        self._note(f"restore {self.value:g}")

    def reset_config(self, new_config):
        self.lr = new_config["lr"]
        return True

    def cleanup(self):
        self._note("cleanup")

    def _note(self, what):
        with open(os.path.join(self.config["log"], f"{self.trial_id}.log"), "a") as f:
            f.write(what + "\n")

    def _failed_before(self):
        path = os.path.join(self.config["log"], f"{self.trial_id}.log")
        return os.path.exists(path) and "fail\n" in open(path).read()


class Files(tune.Trainable):
    """Checkpoints as files in the directory (``save_checkpoint`` returns None)."""

    def setup(self, config):
        self.n = 0

    def step(self):
        self.n += 1
        return {"n": self.n, "done": self.n >= 3}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "n.txt"), "w") as f:
            f.write(str(self.n))

    def load_checkpoint(self, checkpoint_dir):
        self.n = int(open(os.path.join(checkpoint_dir, "n.txt")).read())


def _log(tmp_path):
    path = tmp_path / "log"
    path.mkdir(exist_ok=True)
    return str(path)


def test_a_trainable_class_checkpoints_at_its_frequency_and_end_and_a_retry_restores(
        storage_path, tmp_path):
    log = _log(tmp_path)
    grid = Tuner(
        Climb, param_space={"lr": grid_search([1.0, 2.0]), "log": log,
                            "fail_at": grid_search([None, 4])},
        tune_config=TuneConfig(metric="value", mode="max"),
        run_config=RunConfig(name="climb", storage_path=storage_path, verbose=0,
                             stop={"training_iteration": 5},
                             failure_config=FailureConfig(max_failures=1),
                             checkpoint_config=CheckpointConfig(checkpoint_frequency=2,
                                                                checkpoint_at_end=True)),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    for result in grid:
        lr = result.config["lr"]
        assert result.metrics["training_iteration"] == 5
        assert result.metrics["value"] == pytest.approx(5 * lr)
        # Every second iteration and the last: 2, 4, 5 (as Ray's checkpoint_frequency
        # and checkpoint_at_end).
        kept = sorted(c.metrics["training_iteration"] for c, _ in result.best_checkpoints)
        assert kept == [2, 4, 5]
        with result.checkpoint.as_directory() as d:
            state = json.load(open(os.path.join(d, ".tune_trainable_state.json")))
            assert state["iteration"] == 5 and "_dict_checkpoint.pkl" in os.listdir(d)
        notes = open(os.path.join(log, f"{result.metrics['trial_id']}.log")).read().split()
        if result.config["fail_at"] is None:
            assert notes == ["setup", "cleanup"]
        else:  # failed at its 4th step; the retry is a new instance, restored from 2
            assert notes == ["setup", "fail", "cleanup", "setup", "restore", f"{2 * lr:g}",
                             "cleanup"]
            # Round 3 of the failed attempt (after its last checkpoint) is dropped: each
            # round once in the history.
            rows = result.metrics_dataframe
            assert list(rows["training_iteration"]) == [1, 2, 3, 4, 5]
            assert list(rows["value"]) == pytest.approx([lr * i for i in range(1, 6)])


def test_a_result_with_done_ends_the_trial_and_file_checkpoints_round_trip(
        storage_path):
    # tune.run's spelling of CheckpointConfig(checkpoint_at_end=True).
    analysis = tune.run(Files, name="files", storage_path=storage_path, verbose=0,
                        checkpoint_at_end=True)
    result = analysis.trials[0]
    assert result.error is None and result.metrics["n"] == 3
    assert result.metrics["done"] is True
    assert [c.metrics["training_iteration"] for c, _ in result.best_checkpoints] == [3]
    restored = Files()
    restored.restore(result.checkpoint)
    assert restored.n == 3 and restored.iteration == 3


def test_asha_and_hyperband_stop_and_resume_trainable_classes(storage_path, tmp_path):
    log = _log(tmp_path)
    lrs = [2.0, 1.5, 1.0, 0.5]  # one at a time, best first: ASHA's decisions are known

    def run(scheduler, name, concurrent=None):
        return Tuner(
            Climb, param_space={"lr": grid_search(lrs), "log": log},
            tune_config=TuneConfig(metric="value", mode="max", scheduler=scheduler,
                                   max_concurrent_trials=concurrent),
            run_config=RunConfig(name=name, storage_path=storage_path, verbose=0,
                                 stop={"training_iteration": 9},
                                 checkpoint_config=CheckpointConfig(
                                     checkpoint_frequency=1, num_to_keep=2)),
        ).fit()

    asha = run(ASHAScheduler(max_t=9, grace_period=1, reduction_factor=2), "asha", 1)
    assert asha.num_errors == 0, asha.errors
    iterations = {r.config["lr"]: r.metrics["training_iteration"] for r in asha}
    # Each later trial is behind the first at the first rung: stopped there.
    assert iterations == {2.0: 9, 1.5: 1, 1.0: 1, 0.5: 1}
    hyperband = run(HyperBandScheduler(max_t=9, reduction_factor=3), "hyperband")
    assert hyperband.num_errors == 0, hyperband.errors
    best = hyperband.get_best_result()
    assert best.config["lr"] == 2.0 and best.metrics["training_iteration"] == 9
    resumed = 0
    for result in hyperband:
        # A trial paused at a milestone and resumed is a new instance restored from its
        # checkpoint: its value goes on from where it paused, never from 0.
        notes = open(os.path.join(log, f"{result.metrics['trial_id']}.log")).read()
        resumed += "restore" in notes
        assert result.metrics["value"] == pytest.approx(
            result.config["lr"] * result.metrics["training_iteration"])
    assert resumed >= 1


def test_pbt_exploits_a_trainable_class_that_defines_reset_config(storage_path, tmp_path):
    log = _log(tmp_path)
    pbt = PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=2, quantile_fraction=0.5,
        hyperparam_mutations={"lr": [3.0, 4.0]}, resample_probability=1.0)
    grid = Tuner(
        Climb, param_space={"lr": grid_search([0.1, 0.2, 1.0, 2.0]), "log": log,
                            "delay": 0.2},  # trials side by side, so that PBT compares
        tune_config=TuneConfig(metric="value", mode="max", scheduler=pbt, seed=0),
        run_config=RunConfig(name="pbt", storage_path=storage_path, verbose=0,
                             stop={"training_iteration": 8},
                             checkpoint_config=CheckpointConfig(checkpoint_frequency=1,
                                                                num_to_keep=2)),
    ).fit()
    assert grid.num_errors == 0, grid.errors
    state = json.load(open(os.path.join(storage_path, "pbt", "tuner_state.json")))
    exploited = {t["trial_id"]: t["exploits"] for t in state["trials"] if t["exploits"]}
    assert exploited
    for result in grid:
        exploits = exploited.get(result.metrics["trial_id"])
        if not exploits:
            continue
        # A new instance with the perturbed config, restored from the donor's checkpoint:
        # its value went on from the donor's, climbing at the new rate.
        assert result.config["lr"] in (3.0, 4.0)
        notes = open(os.path.join(log, f"{result.metrics['trial_id']}.log")).read()
        assert "restore" in notes
        assert result.metrics["value"] > 8 * 0.2


def _report_an_empty_checkpoint(config):
    import tempfile

    import engine

    engine.report({"x": 1}, checkpoint=engine.Checkpoint.from_directory(tempfile.mkdtemp()))


def test_an_empty_checkpoint_directory_is_a_checkpoint_as_in_ray(storage_path):
    """Ray's docs report ``Checkpoint.from_directory(d)`` with nothing in ``d`` (the
    checkpoint marks the round); the commit used to fail on the staging it never had."""
    from engine import ScalingConfig
    from engine.trainer import DataParallelTrainer

    result = DataParallelTrainer(
        _report_an_empty_checkpoint, scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name="empty", storage_path=storage_path, verbose=0)).fit()
    assert result.error is None and result.checkpoint is not None
    assert result.checkpoint.metrics["x"] == 1
    with result.checkpoint.as_directory() as d:
        from engine import constants

        # Nothing but what the engine adds to every checkpoint.
        assert set(os.listdir(d)) <= {"model_card.json", constants.COMMIT_MARKER}


# --- Ray Tune's integrations ------------------------------------------------------------
def _xgboost_trainable(config):
    import numpy as np
    import xgboost as xgb

    from engine.tune.integration.xgboost import TuneReportCheckpointCallback

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4))
    y = (x[:, 0] + x[:, 1] > 0).astype(int)
    data = xgb.DMatrix(x, label=y)
    xgb.train({"objective": "binary:logistic", "eval_metric": "logloss",
               "eta": config["eta"]}, data, num_boost_round=5, evals=[(data, "train")],
              callbacks=[TuneReportCheckpointCallback(frequency=2)])


def test_xgboost_in_a_function_trainable_reports_and_checkpoints_through_tune(
        storage_path):
    pytest.importorskip("xgboost")
    from engine.tune.integration.xgboost import TuneReportCheckpointCallback

    grid = Tuner(_xgboost_trainable, param_space={"eta": grid_search([0.1, 0.5])},
                 tune_config=TuneConfig(metric="train-logloss", mode="min"),
                 run_config=RunConfig(name="xgb", storage_path=storage_path, verbose=0)
                 ).fit()
    assert grid.num_errors == 0, grid.errors
    for result in grid:
        assert result.metrics["training_iteration"] == 5
        rows = result.metrics_dataframe["train-logloss"]
        assert rows.is_monotonic_decreasing  # one row per boosting round
        booster = TuneReportCheckpointCallback.get_model(result.checkpoint)
        assert booster.num_boosted_rounds() == 5  # checkpointed at the end
    assert grid.get_best_result().config["eta"] == 0.5


def _inner_train(config):
    import engine

    for step in range(3):
        engine.report({"loss": config["lr"] / (step + 1)},
                      checkpoint=engine.Checkpoint.from_dict({"step": step})
                      if step == 2 else None)


def _train_driver(config):
    from engine import ScalingConfig
    from engine.trainer import DataParallelTrainer
    from engine.tune.integration.ray_train import TuneReportCallback

    DataParallelTrainer(_inner_train, train_loop_config=config,
                        scaling_config=ScalingConfig(num_workers=1),
                        run_config=RunConfig(name=f"inner-{config['lr']}",
                                             storage_path=config["storage"], verbose=0,
                                             callbacks=[TuneReportCallback()])).fit()


def test_a_trainer_inside_a_tune_trial_reports_to_it(storage_path, tmp_path):
    """Ray's Train-inside-Tune: the trial's function runs a trainer whose
    TuneReportCallback reports each of its results to the trial."""
    inner = str(tmp_path / "inner")
    grid = Tuner(_train_driver, param_space={"lr": grid_search([1.0, 2.0]),
                                             "storage": inner},
                 tune_config=TuneConfig(metric="loss", mode="min"),
                 run_config=RunConfig(name="outer", storage_path=storage_path, verbose=0)
                 ).fit()
    assert grid.num_errors == 0, grid.errors
    for result in grid:
        rows = result.metrics_dataframe
        assert list(rows["loss"]) == pytest.approx([result.config["lr"] / s
                                                    for s in (1, 2, 3)])
        path = result.metrics["checkpoint_path"]  # the trainer's own checkpoint
        assert path.startswith(os.path.join(inner, f"inner-{result.config['lr']}"))
        assert "checkpoint_path" not in rows.iloc[0] or rows["checkpoint_path"].isna()[0]
    assert grid.get_best_result().config["lr"] == 1.0
