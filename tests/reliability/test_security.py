"""Safe loading (DESIGN.md): a malicious pickle planted in a run's checkpoints never runs
while the run is listed, scored or resumed — only when the user calls ``to_dict()``
(or passes ``allow_pickle=True``) on it."""

from __future__ import annotations

import os
import pickle

import pandas as pd
import pytest

import engine
from engine import (Checkpoint, FailureConfig, RunConfig, ScalingConfig, TrainingFailedError,
                    constants)
from engine.exceptions import CheckpointError
from engine.evaluate import evaluate
from engine.predict import BatchPredictor
from engine.torch import TorchPredictor, TorchTrainer


class Payload:
    """Unpickling this creates a file: proof that code ran."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def _model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(2, 1)


def _train(config):
    import torch  # noqa: F401 - from_dict then writes torch.save's format

    start = 0
    ckpt = engine.get_checkpoint()
    if ckpt:  # resuming: look at the files, never unpickle them
        with ckpt.as_directory() as d:
            assert constants.DICT_CHECKPOINT_FILE in os.listdir(d)
        start = int(ckpt.metrics["epoch"]) + 1
    for epoch in range(start, 3):
        engine.report({"epoch": epoch}, checkpoint=Checkpoint.from_dict(
            {"model_weights": _model().state_dict(), "epoch": epoch}))
        if epoch == 1 and config.get("fail_after_1") and not ckpt:
            raise RuntimeError("interrupted")


def _plant(checkpoint_dir: str, marker: str) -> None:
    for name in (constants.DICT_CHECKPOINT_FILE, "preprocessor.pkl"):
        with open(os.path.join(checkpoint_dir, name), "wb") as f:
            pickle.dump(Payload(marker), f)


def test_planted_pickle_never_runs_unless_asked(ray_start_4_cpus, storage_path, tmp_path):
    marker = str(tmp_path / "code_ran")
    run = RunConfig(storage_path=storage_path, name="victim", verbose=0,
                    failure_config=FailureConfig(max_failures=0))
    trainer = TorchTrainer(_train, train_loop_config={"fail_after_1": True},
                           scaling_config=ScalingConfig(num_workers=2), run_config=run)
    with pytest.raises(TrainingFailedError):
        trainer.fit()
    run_dir = os.path.join(storage_path, "victim")
    latest = os.path.join(run_dir, "checkpoint_000001")
    _plant(latest, marker)

    # Listing: the run record, checkpoints, model cards.
    ckpt = Checkpoint.from_directory(latest)
    assert ckpt.get_model_card()["framework"] == "torch"
    assert not os.path.exists(marker)

    # Scoring: predictors and batch prediction refuse the pickles, saying how to opt in.
    df = pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0], "y": [0.0, 1.0]})
    with pytest.raises(CheckpointError, match="allow_pickle=True"):
        TorchPredictor.from_checkpoint(ckpt, model=_model())
    with pytest.raises(CheckpointError, match="allow_pickle=True"):
        BatchPredictor.from_checkpoint(ckpt, TorchPredictor, model=_model()).predict(df)
    with pytest.raises(CheckpointError, match="allow_pickle=True"):
        evaluate(ckpt, df, label_column="y", predictor_cls=TorchPredictor, model=_model())
    assert not os.path.exists(marker)

    # Resuming: the run goes on from the planted checkpoint without unpickling it.
    result = TorchTrainer(_train, train_loop_config={"fail_after_1": True},
                          scaling_config=ScalingConfig(num_workers=2), run_config=run).fit()
    assert list(result.metrics_dataframe["epoch"])[-1] == 2
    assert not os.path.exists(marker)

    # Asking for it runs it: to_dict() is a full unpickle, as documented.
    Checkpoint.from_directory(latest).to_dict()
    assert os.path.exists(marker)
