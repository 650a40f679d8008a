"""TransformersTrainer and TransformersPredictor: a tiny BERT text classifier trained with
DDP on 2 real workers (no hub access), checkpointed every epoch, resumed after a worker is
SIGKILLed, and served through a pipeline from its checkpoint."""

from __future__ import annotations

import json
import math
import os
import signal
import time

import pytest

transformers = pytest.importorskip("transformers")

from engine import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from engine.exceptions import ConfigError, FrameworkMismatchError
from engine.huggingface import HuggingFaceTrainer, TransformersPredictor, TransformersTrainer
from tests.support import hf_fixtures

# The module's fits check what training produced, not how workers start: they run on
# warm pooled workers (tests/README.md, "How a new test pays for itself").
pytestmark = pytest.mark.usefixtures("pooled_workers")


N_TRAIN, N_VAL, EPOCHS, BATCH = 2000, 400, 3, 32
# Each worker trains on its half of the split DataFrame: the Trainer must not halve it again.
STEPS_PER_EPOCH = math.ceil(N_TRAIN // 2 / BATCH)


def trainer_init(train_dataset, eval_dataset, **config):
    """The user's side: a transformers.Trainer around a tiny BERT built from a config."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(config["tokenizer_dir"])
    args = transformers.TrainingArguments(
        output_dir="out", num_train_epochs=config["epochs"], learning_rate=2e-3,
        per_device_train_batch_size=BATCH, per_device_eval_batch_size=128,
        eval_strategy="epoch", save_strategy="epoch", logging_strategy="epoch",
        report_to="none", disable_tqdm=True, seed=0)
    trainer = transformers.Trainer(
        model=hf_fixtures.tiny_bert(len(tokenizer)), args=args,
        train_dataset=train_dataset, eval_dataset=eval_dataset, processing_class=tokenizer,
        data_collator=transformers.DataCollatorWithPadding(tokenizer),
        compute_metrics=hf_fixtures.accuracy_metric)
    if config.get("kill_rank_1"):
        trainer.add_callback(_KillRank1Once())
    return trainer


class _KillRank1Once(transformers.TrainerCallback):
    """SIGKILLs rank 1 early in the second epoch of the first attempt, once the first
    epoch's checkpoint is committed (so the restart must resume from it)."""

    def on_step_begin(self, args, state, control, **kwargs):
        import engine

        ctx = engine.get_context()
        if (engine.get_checkpoint() is None and ctx.get_world_rank() == 1
                and state.global_step == STEPS_PER_EPOCH + 1):
            marker = os.path.join(ctx.get_trial_dir(), "checkpoint_000000",
                                  ".trainyard_committed")
            deadline = time.monotonic() + 120
            while not os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture(scope="module")
def text_set(tmp_path_factory):
    splits = hf_fixtures.make_splits(N_TRAIN, N_VAL)
    tokenizer = hf_fixtures.train_tokenizer(splits["train"][0])
    tokenizer_dir = str(tmp_path_factory.mktemp("tokenizer"))
    tokenizer.save_pretrained(tokenizer_dir)
    return {"splits": splits, "tokenizer": tokenizer, "tokenizer_dir": tokenizer_dir}


@pytest.fixture(scope="module")
def resumed_run(ray_session, text_set, tmp_path_factory):
    """One fit: train split as a DataFrame (the engine shards it), evaluation set as a
    torch Dataset, rank 1 killed once in epoch 2 and the run retried."""
    tok = text_set["tokenizer"]
    storage = str(tmp_path_factory.mktemp("results"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        trainer = TransformersTrainer(
            trainer_init,
            trainer_init_config={"tokenizer_dir": text_set["tokenizer_dir"], "epochs": EPOCHS,
                                 "kill_rank_1": True},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path=storage, name="hf_text",
                                 failure_config=FailureConfig(max_failures=1),
                                 checkpoint_config=CheckpointConfig(num_to_keep=None)),
            datasets={"train": hf_fixtures.encoded_frame(tok, *text_set["splits"]["train"]),
                      "evaluation": hf_fixtures.torch_dataset(
                          tok, *text_set["splits"]["validation"])})
        return trainer.fit()


@pytest.mark.slow
def test_text_classifier_trains_checkpoints_each_epoch_and_resumes(resumed_run):
    result = resumed_run
    assert result.num_failures == 1
    assert result.metrics["eval_accuracy"] >= 0.9
    assert result.metrics["epoch"] == EPOCHS
    assert result.metrics["step"] == EPOCHS * STEPS_PER_EPOCH
    # One round per epoch, numbered on across the restart; the restarted attempt began at
    # the second epoch (resumed from the first epoch's checkpoint, not from scratch).
    df = result.metrics_dataframe.sort_values("training_iteration")
    assert list(df["epoch"]) == [1.0, 2.0, 3.0]
    assert list(df["iterations_since_restore"]) == [1, 1, 2]
    assert list(df["step"]) == [STEPS_PER_EPOCH * e for e in (1, 2, 3)]
    # A committed checkpoint per epoch: the Trainer's files from rank 0, each rank's RNG.
    dirs = sorted(d for d in os.listdir(result.path) if d.startswith("checkpoint_"))
    assert dirs == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]
    for i, name in enumerate(dirs):
        files = set(os.listdir(os.path.join(result.path, name)))
        assert {"model.safetensors", "config.json", "optimizer.pt", "scheduler.pt",
                "trainer_state.json", "rng_state_0.pth", "rng_state_1.pth",
                "tokenizer.json", ".trainyard_committed", "model_card.json"} <= files
        with open(os.path.join(result.path, name, "trainer_state.json")) as f:
            assert json.load(f)["global_step"] == (i + 1) * STEPS_PER_EPOCH
    assert result.checkpoint.path.endswith("checkpoint_000002")
    assert result.checkpoint.get_model_card()["framework"] == "transformers"


@pytest.mark.slow
def test_predictor_loads_checkpoint_into_a_pipeline(resumed_run, monkeypatch, tmp_path):
    import pandas as pd

    # Set once per process by transformers' pipelines and torch's compiler cache.
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))

    texts, labels = hf_fixtures.make_sentences(200, seed=7)
    predictor = TransformersPredictor.from_checkpoint(resumed_run.checkpoint)
    out = predictor.predict(pd.DataFrame({"text": texts}))
    assert list(out.columns) == ["label", "score", "predictions"]
    accuracy = (out["predictions"].to_numpy() == labels).mean()
    assert accuracy >= 0.9
    assert set(out["label"]) <= {"negative", "positive"}
    assert out["score"].between(0, 1).all()
    # The checkpoint says it is a transformers model: another framework's predictor refuses.
    from engine.torch import TorchPredictor

    with pytest.raises(FrameworkMismatchError, match="transformers"):
        TorchPredictor.from_checkpoint(resumed_run.checkpoint)


def test_driver_side_arguments(text_set):
    assert HuggingFaceTrainer is TransformersTrainer
    with pytest.raises(ConfigError, match="transformers.Trainer"):
        TransformersTrainer("not a function")
    ds = hf_fixtures.torch_dataset(text_set["tokenizer"], ["a b"], [0])
    with pytest.raises(ConfigError, match="both 'evaluation' and 'validation'"):
        TransformersTrainer(trainer_init, datasets={"train": ds, "evaluation": ds,
                                                    "validation": ds})
    import pandas as pd

    from engine import DataConfig

    with pytest.raises(ConfigError, match="shards the evaluation set itself"):
        TransformersTrainer(trainer_init, datasets={"validation": pd.DataFrame({"x": [1]})},
                            dataset_config=DataConfig(datasets_to_split="all"))
    with pytest.raises(ConfigError, match="must be a dict"):
        TransformersTrainer(trainer_init, trainer_init_config=[1])
    # A Tuner's param_space may name the config either way.
    from engine.tune._trainable import TrainerTrainable

    trainable = TrainerTrainable(TransformersTrainer(trainer_init,
                                                     trainer_init_config={"epochs": 1}))
    assert trainable.train_loop_config({"trainer_init_config": {"lr": 0.1}}) == \
        {"epochs": 1, "lr": 0.1}
    assert trainable.train_loop_config({"train_loop_config": {"epochs": 2}}) == {"epochs": 2}
    assert trainable.reusable  # Accelerate's process state is reset between trials


def test_importing_engine_huggingface_imports_neither_transformers_nor_accelerate():
    import subprocess
    import sys

    code = ("import sys, engine.huggingface; print([m for m in ('transformers', "
            "'accelerate', 'tokenizers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_logged_values_are_reported_as_plain_numbers():
    import numpy as np
    import torch

    from engine.huggingface.callback import _DROP, _plain

    assert _plain(np.float32(0.5)) == 0.5 and type(_plain(np.float32(0.5))) is float
    assert _plain(torch.tensor(3)) == 3
    assert _plain({"per_class": np.array([0.25, 0.75])}) == {"per_class": [0.25, 0.75]}
    assert _plain(float("nan")) != _plain(float("nan"))  # NaN stays a float
    assert _plain(object()) is _DROP


@pytest.mark.gpu
def test_text_classifier_on_gpus(ray_session, text_set, tmp_path):
    import torch

    tok = text_set["tokenizer"]
    workers = min(2, torch.cuda.device_count())
    result = TransformersTrainer(
        trainer_init,
        trainer_init_config={"tokenizer_dir": text_set["tokenizer_dir"], "epochs": 2},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=True),
        run_config=RunConfig(storage_path=str(tmp_path)),
        datasets={"train": hf_fixtures.torch_dataset(tok, *text_set["splits"]["train"]),
                  "validation": hf_fixtures.encoded_frame(
                      tok, *text_set["splits"]["validation"])}).fit()
    assert result.metrics["eval_accuracy"] >= 0.9
    assert result.metrics["epoch"] == 2.0
