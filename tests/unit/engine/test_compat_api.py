"""ExperimentAnalysis over a ResultGrid, with_parameters, prepare_trainer (no Ray)."""

from __future__ import annotations

import pickle

import pytest

from engine import Checkpoint, ConfigError, Result
from engine.huggingface.transformers import prepare_trainer
from engine.tune import ExperimentAnalysis, ResultGrid, with_parameters


def _grid(tmp_path):
    results = []
    for i, (lr, losses) in enumerate([(0.1, [3.0, 2.0]), (0.01, [1.0, 1.5])]):
        ckpts = []
        for step, loss in enumerate(losses):
            d = tmp_path / f"t{i}_{step}"
            d.mkdir()
            ckpts.append((Checkpoint.from_directory(str(d)), {"loss": loss}))
        results.append(Result(metrics={"loss": losses[-1], "trial_id": f"t{i}"},
                              config={"lr": lr}, path=str(tmp_path / f"t{i}"),
                              best_checkpoints=ckpts,
                              history=[{"loss": v} for v in losses]))
    return ResultGrid(results, "loss", "min", str(tmp_path))


def test_best_of_an_experiment(tmp_path):
    analysis = ExperimentAnalysis(_grid(tmp_path), "loss", "min")
    assert analysis.best_config == {"lr": 0.01}
    assert analysis.best_result["loss"] == 1.5
    assert analysis.get_best_config("loss", "max") == {"lr": 0.1}
    best = analysis.get_best_checkpoint(analysis.best_trial)
    assert best.path.endswith("t1_0")  # loss 1.0, not the last one
    assert analysis.get_best_checkpoint(str(tmp_path / "t0")).path.endswith("t0_1")
    assert list(analysis.dataframe()["config/lr"]) == [0.1, 0.01]
    assert set(analysis.results) == {"t0", "t1"}


def test_best_needs_a_metric(tmp_path):
    analysis = ExperimentAnalysis(_grid(tmp_path))
    with pytest.raises(ValueError, match="pass `metric` and `mode` to tune.run"):
        analysis.best_config


def _train(config, data=None):
    return config["x"] + sum(data)


def test_with_parameters_passes_values_and_pickles():
    fn = with_parameters(_train, data=[1, 2])
    assert fn({"x": 1}) == 4 and fn.__name__ == "_train"
    assert pickle.loads(pickle.dumps(fn))({"x": 0}) == 3


def test_with_parameters_refuses_a_trainer():
    from engine.trainer import DataParallelTrainer

    with pytest.raises(ConfigError, match="train_loop_config"):
        with_parameters(DataParallelTrainer(lambda: None), data=1)


class _Shard:
    def iter_rows(self):
        return iter([{"a": 1}, {"a": 2}])


class _FakeTrainer:
    def __init__(self):
        self.train_dataset, self.eval_dataset = _Shard(), _Shard()

    def get_train_dataloader(self):
        return "loader"


def test_prepare_trainer_turns_shards_into_rows():
    trainer = prepare_trainer(_FakeTrainer())
    assert len(trainer.train_dataset) == 2 and trainer.eval_dataset[1] == {"a": 2}
    assert trainer.get_train_dataloader.__wrapped__ is not None  # not re-split
