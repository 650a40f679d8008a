"""LightGBMTrainer on real Ray with 2 workers joined by LightGBM's socket network."""

from __future__ import annotations

import os

import pytest

from engine import ConfigError, RunConfig, ScalingConfig, get_dataset_shard

lightgbm = pytest.importorskip("lightgbm")

from engine.lightgbm import LightGBMPredictor, LightGBMTrainer  # noqa: E402

# The module's fits check what training produced, not how workers start: they run on
# warm pooled workers (tests/README.md, "How a new test pays for itself").
pytestmark = pytest.mark.usefixtures("pooled_workers")


PARAMS = {"objective": "binary", "metric": ["binary_logloss", "binary_error"],
          "num_leaves": 15, "verbose": -1}


def breast_cancer_split():
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    return train_test_split(x.assign(target=y), test_size=0.3, random_state=0, stratify=y)


def synthetic(n_rows: int, seed: int = 0):
    import pandas as pd
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=n_rows, n_features=10, random_state=seed)
    return pd.DataFrame(x, columns=[f"f{i}" for i in range(x.shape[1])]).assign(label=y)


def _function_style_loop(config):
    from engine import get_checkpoint
    from engine.lightgbm import ReportCallback, get_network_params

    shard = get_dataset_shard("train").materialize().to_pandas()
    params = dict(config["params"], **get_network_params())
    dtrain = lightgbm.Dataset(shard.drop(columns=["target"]), label=shard["target"])
    checkpoint = get_checkpoint()
    lightgbm.train(params, dtrain, num_boost_round=config["rounds"],
                   valid_sets=[dtrain], valid_names=["train"],
                   init_model=ReportCallback.get_model(checkpoint) if checkpoint else None,
                   callbacks=[ReportCallback(frequency=5, extra_metrics={
                       "num_machines": params["num_machines"], "rows": len(shard)})])


@pytest.fixture(scope="module")
def function_style_fit(ray_session, tmp_path_factory):
    train, valid = breast_cancer_split()
    result = LightGBMTrainer(
        _function_style_loop,
        train_loop_config={"params": dict(PARAMS, num_threads=1), "rounds": 10},
        datasets={"train": train}, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path_factory.mktemp("lgb")),
                             verbose=0)).fit()
    return result, train, valid


def test_function_style_joins_the_network(function_style_fit):
    result, train, _ = function_style_fit
    assert result.metrics["num_machines"] == 2
    assert result.metrics["rows"] == len(train) // 2
    assert result.metrics["training_iteration"] == 10
    assert [m["training_iteration"] for _, m in result.best_checkpoints] == [5, 10]
    assert LightGBMTrainer.get_model(result.checkpoint).current_iteration() == 10


def test_built_in_loop_resumes_and_trains_data_parallel(function_style_fit, tmp_path):
    start, train, valid = function_style_fit
    result = LightGBMTrainer(
        datasets={"train": train, "validation": valid}, label_column="target",
        params=PARAMS, num_boost_round=20, checkpoint_frequency=5,
        resume_from_checkpoint=start.checkpoint,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0)).fit()

    # Each worker's Dataset holds its own half of the training rows ...
    workers = result.worker_metrics_dataframe
    rows = workers.groupby("rank")["worker_train_rows"].last()
    assert sorted(rows.index) == [0, 1]
    assert rows[0] == rows[1] == len(train) // 2
    # ... and both grew the same trees: metrics on the (whole) validation set agree,
    # while LightGBM's train metrics are each rank's own half.
    last = workers[workers["training_iteration"] == 10]
    assert last["validation-binary_logloss"].nunique() == 1
    assert last["train-binary_logloss"].nunique() == 2

    # Rounds 11..20 of the resumed model: one report each, checkpoints at 15 and 20.
    df = result.metrics_dataframe
    assert list(df["training_iteration"]) == list(range(1, 11))
    assert df["validation-binary_logloss"].notna().all()
    assert [m["training_iteration"] for _, m in result.best_checkpoints] == [5, 10]
    assert sorted(os.listdir(result.checkpoint.path)) == [
        ".trainyard_committed", "model.txt", "model_card.json"]
    assert LightGBMTrainer.get_model(result.checkpoint).current_iteration() == 20

    predictor = LightGBMPredictor.from_checkpoint(result.checkpoint)
    scored = predictor.predict(valid.drop(columns=["target"]))
    accuracy = float(((scored["predictions"] > 0.5) == valid["target"]).mean())
    assert accuracy >= 0.93


def test_early_stopping_checkpoints_the_final_model_and_resuming_it_reports_once(
        function_style_fit, tmp_path):
    _, train, valid = function_style_fit
    fast = dict(PARAMS, learning_rate=0.5, metric="binary_logloss")
    stopped = LightGBMTrainer(
        datasets={"train": train, "validation": valid}, label_column="target",
        params=fast, num_boost_round=200, callbacks=[lightgbm.early_stopping(3, verbose=False)],
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path / "a"), verbose=0)).fit()
    # The round that stopped training carried no checkpoint (checkpoint_frequency=0):
    # ReportCallback.finish() reported the final model in one more report.
    assert stopped.metrics["training_iteration"] < 200
    assert len(stopped.best_checkpoints) == 1
    rounds = LightGBMTrainer.get_model(stopped.checkpoint).current_iteration()
    assert 0 < rounds < 200

    # A model that already has num_boost_round rounds: one report, with the model.
    resumed = LightGBMTrainer(
        datasets={"train": train}, label_column="target", params=fast,
        num_boost_round=rounds, resume_from_checkpoint=stopped.checkpoint,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path / "b"), verbose=0)).fit()
    assert resumed.metrics["training_iteration"] == 1
    assert resumed.metrics["num_boosted_rounds"] == rounds
    assert resumed.metrics["worker_train_rows"] == len(train) // 2
    assert LightGBMTrainer.get_model(resumed.checkpoint).current_iteration() == rounds


def test_bad_arguments_say_how_to_fix_them():
    train = synthetic(100)
    with pytest.raises(ConfigError, match="'voting'"):
        LightGBMTrainer(datasets={"train": train}, label_column="label",
                        params={"tree_learner": "feature"},
                        scaling_config=ScalingConfig(num_workers=2))
    with pytest.raises(ConfigError, match="label_column"):
        LightGBMTrainer(datasets={"train": train})
