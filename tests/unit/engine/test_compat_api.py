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


# --- Ray 2.41+ spellings and Ray's lenient values ---------------------------------------
def test_the_ray_2_41_names_are_under_engine_tune():
    import engine
    from engine import tune

    assert (tune.RunConfig, tune.CheckpointConfig, tune.FailureConfig, tune.Result) == (
        engine.RunConfig, engine.CheckpointConfig, engine.FailureConfig, engine.Result)
    assert tune.Trainable.__module__ == "engine.tune.trainable"


def test_rays_lenient_values_are_taken_as_ray_takes_them():
    from engine import RunConfig, tune
    from engine.tune._trainable import _RESOURCES_ATTR

    assert RunConfig(stop={"done": True}).stop == {"done": True}
    assert [RunConfig(verbose=v).verbose for v in (False, True, 3)] == [0, 1, 2]
    fn = tune.with_resources(lambda config: None, {"cpu": 2, "gpu": 0,
                                                   "custom_resources": {"tpu": 1}})
    assert getattr(fn, _RESOURCES_ATTR) == {"CPU": 2, "tpu": 1}
    with pytest.raises(ConfigError, match="names CPU twice"):
        tune.with_resources(lambda config: None, {"cpu": 1, "CPU": 2})


def test_tune_get_context_outside_a_trial_has_no_trial():
    from engine import tune

    ctx = tune.get_context()
    assert (ctx.get_trial_id(), ctx.get_trial_name(), ctx.get_trial_dir(),
            ctx.get_experiment_name(), ctx.get_world_rank(), ctx.get_world_size()) == (
        None, None, None, None, 0, 1)


def test_a_trainable_class_steps_saves_and_restores_without_ray(tmp_path):
    from engine import tune

    class Count(tune.Trainable):
        def setup(self, config):
            self.total = config.get("start", 0)

        def step(self):
            self.total += 1
            return {"total": self.total, "timesteps_this_iter": 10}

        def save_checkpoint(self, checkpoint_dir):
            return {"total": self.total}

        def load_checkpoint(self, checkpoint):
            self.total = checkpoint["total"]

    first = Count({"start": 5})
    results = [first.train() for _ in range(3)]
    assert [r["total"] for r in results] == [6, 7, 8]
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    assert results[-1]["timesteps_total"] == 30 and results[-1]["done"] is False
    path = first.save(str(tmp_path / "ckpt"))
    again = Count({})
    again.restore(path)
    assert (again.total, again.iteration) == (8, 3)
    assert again.train()["training_iteration"] == 4
    assert again.train()["iterations_since_restore"] == 2

    class NoStep(tune.Trainable):
        pass

    with pytest.raises(NotImplementedError, match="must implement step"):
        NoStep().train()
    with pytest.raises(NotImplementedError, match="save_checkpoint"):
        NoStep().save(str(tmp_path / "none"))


def test_the_tune_integrations_are_at_rays_paths():
    pytest.importorskip("xgboost")
    pytest.importorskip("lightgbm")
    import engine.lightgbm
    import engine.xgboost
    from engine.tune.integration import lightgbm as tune_lgbm
    from engine.tune.integration import xgboost as tune_xgb
    from engine.tune.integration.ray_train import TuneReportCallback

    assert tune_xgb.TuneReportCheckpointCallback is engine.xgboost.RayTrainReportCallback
    assert tune_lgbm.TuneReportCheckpointCallback is engine.lightgbm.RayTrainReportCallback
    with pytest.raises(AttributeError, match="use TuneReportCheckpointCallback"):
        tune_xgb.TuneReportCallback
    assert TuneReportCallback.__module__ == "engine.tune.integration.ray_train"


def test_save_checkpoint_may_return_its_own_directory_as_in_ray(tmp_path):
    import os

    from engine import tune

    class Dir(tune.Trainable):
        def step(self):
            return {"x": 1}

        def save_checkpoint(self, checkpoint_dir):
            open(os.path.join(checkpoint_dir, "state"), "w").write("s")
            return checkpoint_dir

        def load_checkpoint(self, checkpoint):
            self.loaded = open(os.path.join(checkpoint, "state")).read()

    first = Dir()
    first.train()
    again = Dir()
    again.restore(first.save(str(tmp_path / "c")))
    assert again.loaded == "s" and again.iteration == 1
    with pytest.raises(TypeError, match="a path inside checkpoint_dir"):
        type("Elsewhere", (Dir,), {"save_checkpoint": lambda self, d: "/tmp"})().save(
            str(tmp_path / "d"))
