"""Ray Train/Tune idioms of the checkpoint and result API (issue 23, gap 6):
Trainer.restore/can_restore, Result.from_path and get_best_checkpoint, Checkpoint
metadata and from_uri/to_uri, RunConfig(log_to_file=...), CheckpointConfig(
checkpoint_frequency, checkpoint_at_end) for a built-in loop, Tuner.get_results() and
FailureConfig(fail_fast=...).

Ported from Ray by rewriting imports only: ray.train -> engine, ray.tune -> engine.tune.
"""

import os
import tempfile
import uuid

import pandas as pd

import engine as train
from engine import (Checkpoint, CheckpointConfig, FailureConfig, Result, RunConfig,
                    ScalingConfig, TrainingFailedError)
from engine import tune
from engine.torch import TorchTrainer
from engine.xgboost import XGBoostTrainer

STORAGE = os.environ.get("TRAINYARD_STORAGE_PATH") or tempfile.mkdtemp()
FLAG = os.path.join(tempfile.mkdtemp(), "failed_once")


# --- Trainer.restore after a crash, Result.from_path, get_best_checkpoint, log_to_file --
def train_func(config):
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        start = checkpoint.get_metadata()["epoch"] + 1
    for epoch in range(start, 5):
        print(f"epoch {epoch} of run")
        if epoch == 3 and not os.path.exists(config["flag"]):
            open(config["flag"], "w").close()
            raise RuntimeError("preempted")
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = Checkpoint.from_directory(tmp)
            ckpt.set_metadata({"epoch": epoch})
            ckpt.update_metadata({"note": "ok"})
            train.report({"epoch": epoch, "loss": abs(epoch - 2) + 0.5}, checkpoint=ckpt)


trainer = TorchTrainer(train_func, train_loop_config={"flag": FLAG},
                       scaling_config=ScalingConfig(num_workers=1),
                       run_config=RunConfig(name="restore_me", storage_path=STORAGE,
                                            verbose=0, log_to_file=True))
try:
    trainer.fit()
    raise AssertionError("the first fit must fail at epoch 3")
except TrainingFailedError as exc:
    path = exc.result.path
assert TorchTrainer.can_restore(path)
assert not TorchTrainer.can_restore(os.path.join(STORAGE, "no_such_run"))
result = TorchTrainer.restore(path).fit()
assert result.error is None and result.metrics["epoch"] == 4, result.metrics
assert [m["epoch"] for _, m in result.best_checkpoints] == [0, 1, 2, 3, 4]
assert result.checkpoint.get_metadata() == {"epoch": 4, "note": "ok"}

stdout = open(os.path.join(path, "stdout")).read()
assert "epoch 0 of run" in stdout and "epoch 4 of run" in stdout, stdout

loaded = Result.from_path(path)
assert loaded.metrics["epoch"] == 4 and loaded.checkpoint == result.checkpoint
best = loaded.get_best_checkpoint(metric="loss", mode="min")
assert best.get_metadata()["epoch"] == 2
try:
    loaded.get_best_checkpoint(metric="accuracy", mode="max")
    raise AssertionError("an unreported metric must fail")
except RuntimeError as exc:
    assert "accuracy" in str(exc)

# --- Checkpoint.to_uri / from_uri ------------------------------------------------------
uri = best.to_uri(f"memory://exported/{uuid.uuid4().hex}/best")
copy = Checkpoint.from_uri(uri)
assert copy.get_metadata()["epoch"] == 2

# --- CheckpointConfig(checkpoint_frequency, checkpoint_at_end) for XGBoost ------------
df = pd.DataFrame({"x": [float(i % 7) for i in range(200)],
                   "y": [float(i % 7 > 3) for i in range(200)]})
result = XGBoostTrainer(
    label_column="y", params={"objective": "binary:logistic"}, num_boost_round=5,
    datasets={"train": df}, scaling_config=ScalingConfig(num_workers=1),
    run_config=RunConfig(verbose=0, checkpoint_config=CheckpointConfig(
        checkpoint_frequency=2, checkpoint_at_end=True))).fit()
rounds = [m["training_iteration"] for _, m in result.best_checkpoints]
assert rounds == [2, 4, 5], rounds


# --- Tuner.get_results() and FailureConfig(fail_fast=...) -------------------------------
def objective(config):
    if config["x"] == 1:
        raise ValueError("bad x")
    tune.report({"score": config["x"]})


def tuner(fail_fast, name):
    return tune.Tuner(
        objective, param_space={"x": tune.grid_search([0, 1, 2, 3])},
        tune_config=tune.TuneConfig(metric="score", mode="max", max_concurrent_trials=1),
        run_config=RunConfig(name=name, storage_path=STORAGE, verbose=0,
                             failure_config=FailureConfig(fail_fast=fail_fast)))


grid = tuner(True, "fail_fast").fit()
assert len(grid) == 2 and grid.num_errors == 1, grid  # trials after the failure never ran
try:
    tuner("raise", "fail_fast_raise").fit()
    raise AssertionError("fail_fast='raise' must raise the trial's error")
except TrainingFailedError as exc:
    assert "bad x" in str(exc)

grid = tuner(False, "all_trials").fit()
assert len(grid) == 4 and grid.num_errors == 1
again = tune.Tuner.restore(os.path.join(STORAGE, "all_trials"), objective).get_results()
assert sorted(r.metrics.get("score", -1) for r in again) == [-1, 0, 2, 3]
assert again.get_best_result().config["x"] == 3
print("OK")
