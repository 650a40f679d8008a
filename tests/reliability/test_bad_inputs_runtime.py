"""Bad input that only shows once a run starts (real Ray, 2 workers): each ends with an
error that names the problem, and loses nothing that was already committed."""

from __future__ import annotations

import json
import math
import os

import pandas as pd
import pytest

import engine
from engine import (Checkpoint, CheckpointConfig, RunConfig, ScalingConfig,
                    TrainingFailedError)
from engine.exceptions import CheckpointError, FrameworkMismatchError, StorageError
from engine.torch import TorchPredictor, TorchTrainer

# The module's fits check what training produced, not how workers start: they run on
# warm pooled workers (tests/README.md, "How a new test pays for itself").
pytestmark = pytest.mark.usefixtures("pooled_workers")



def _fit(train_func, storage_path, name=None, **kwargs):
    run = RunConfig(storage_path=storage_path, name=name, verbose=0,
                    checkpoint_config=kwargs.pop("checkpoint_config", None))
    return TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                        run_config=run, **kwargs).fit()


def _non_string_key():
    engine.report({1: 2.0})


def _dataset_typo():
    engine.get_dataset_shard("trian")


def test_report_with_a_non_string_key(ray_start_4_cpus, storage_path):
    with pytest.raises(TrainingFailedError, match="metric key '1' must be a str"):
        _fit(_non_string_key, storage_path)


def test_dataset_name_typo_lists_the_names_passed(ray_start_4_cpus, storage_path):
    with pytest.raises(TrainingFailedError) as info:
        _fit(_dataset_typo, storage_path, datasets={"train": pd.DataFrame({"x": range(4)})})
    assert "get_dataset_shard('trian'): no dataset of that name" in str(info.value)
    assert "Passed: ['train']" in str(info.value)


def _three_checkpoints():
    for i in range(3):
        engine.report({"i": i}, checkpoint=Checkpoint.from_dict({"i": i}))


def test_corrupt_run_record_is_a_clear_error_and_deletes_nothing(ray_start_4_cpus,
                                                                 storage_path):
    _fit(_three_checkpoints, storage_path, name="corrupt")
    run_dir = os.path.join(storage_path, "corrupt")
    record = os.path.join(run_dir, "run_state.json")
    text = open(record).read()
    with open(record, "w") as f:
        f.write(text.replace('"FINISHED"', '"RUNNING"')[:150])  # torn and unfinished
    before = sorted(os.listdir(run_dir))
    with pytest.raises(StorageError) as info:
        _fit(_three_checkpoints, storage_path, name="corrupt")
    message = str(info.value)
    assert "run_state.json of run 'corrupt' is not valid" in message
    assert "nothing was deleted" in message and "move it aside" in message
    assert sorted(os.listdir(run_dir)) == before
    assert Checkpoint.from_directory(os.path.join(run_dir, "checkpoint_000002")
                                     ).to_dict() == {"i": 2}


def test_resume_from_another_frameworks_checkpoint(ray_start_4_cpus, storage_path, tmp_path):
    foreign = tmp_path / "xgb"
    foreign.mkdir()
    (foreign / "model.json").write_text("{}")
    (foreign / "model_card.json").write_text(json.dumps(
        {"framework": "xgboost", "trainer": "XGBoostTrainer"}))
    with pytest.raises(FrameworkMismatchError, match="written by 'XGBoostTrainer' "
                                                     r"\(framework 'xgboost'\)"):
        _fit(_three_checkpoints, storage_path,
             resume_from_checkpoint=Checkpoint.from_directory(str(foreign)))
    # Nothing started: no run directory was made for it.
    assert not [d for d in os.listdir(storage_path) if d.startswith("TorchTrainer_")]


def test_a_directory_that_is_not_a_checkpoint_of_ours(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    ckpt = Checkpoint.from_directory(str(tmp_path))
    with pytest.raises(CheckpointError, match="not made by Checkpoint.from_dict"):
        ckpt.to_dict()
    with pytest.raises(CheckpointError, match="holds no saved model"):
        TorchPredictor.from_checkpoint(ckpt)
    assert ckpt.get_model_card() is None
    with pytest.raises(CheckpointError, match="does not exist|no such|not found"):
        Checkpoint.from_directory(str(tmp_path / "missing"))


def _nan_scores():
    for i, acc in enumerate([0.5, float("nan"), 0.7, float("nan")]):
        engine.report({"acc": acc}, checkpoint=Checkpoint.from_dict({"i": i}))


def test_nan_score_ranks_worst(ray_start_4_cpus, storage_path):
    result = _fit(_nan_scores, storage_path, checkpoint_config=CheckpointConfig(
        num_to_keep=2, checkpoint_score_attribute="acc", checkpoint_score_order="max"))
    kept = [(c.to_dict()["i"], m["acc"]) for c, m in result.best_checkpoints]
    # The two finite scores are the best two; NaN ones are dropped once a better exists
    # (the latest is kept only until a newer one arrives).
    assert [i for i, _ in kept] == [0, 2]
    assert not any(math.isnan(a) for _, a in kept)
