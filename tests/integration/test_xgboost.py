"""XGBoostTrainer on real Ray with 2 workers joined by XGBoost's collective: sharding,
per-round metrics, checkpoints, resume, a SIGKILLed worker, the function style and
XGBoostPredictor."""

from __future__ import annotations

import os
import signal

import numpy as np
import pandas as pd
import pytest

from engine import (CheckpointConfig, ConfigError, FailureConfig, RunConfig, ScalingConfig,
                    get_dataset_shard)
from engine.callbacks import Callback

xgboost = pytest.importorskip("xgboost")

from engine.predict import evaluate  # noqa: E402
from engine.xgboost import XGBoostPredictor, XGBoostTrainer  # noqa: E402

# The module's fits check what training produced: they run on warm pooled workers
# (tests/README.md, "How a new test pays for itself"); the fault tests ask for
# fresh_workers.
pytestmark = pytest.mark.usefixtures("pooled_workers")


PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"],
          "tree_method": "hist", "max_depth": 4}


def breast_cancer_split():
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    df = x.assign(target=y)
    return train_test_split(df, test_size=0.3, random_state=0, stratify=y)


def synthetic(n_train: int, n_valid: int, seed: int = 0, categorical: bool = False):
    """make_classification rows; with ``categorical``, the first feature becomes a
    pandas category column ("a" … "e", its quintile)."""
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=n_train + n_valid, n_features=20, n_informative=10,
                               shuffle=False, flip_y=0.05, random_state=seed)
    df = pd.DataFrame(x, columns=[f"f{i}" for i in range(x.shape[1])]).assign(label=y)
    if categorical:
        df["f0"] = pd.qcut(df["f0"], 5, labels=list("abcde"))
    return df.iloc[:n_train].reset_index(drop=True), df.iloc[n_train:].reset_index(drop=True)


@pytest.fixture(scope="module")
def breast_cancer_fit(ray_session, tmp_path_factory):
    train, valid = breast_cancer_split()
    trainer = XGBoostTrainer(
        datasets={"train": train, "validation": valid}, label_column="target",
        params=PARAMS, num_boost_round=20, checkpoint_frequency=5,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path_factory.mktemp("xgb")), verbose=0))
    return trainer.fit(), train, valid


def test_breast_cancer_trains_data_parallel(breast_cancer_fit):
    result, train, valid = breast_cancer_fit

    # Each worker's DMatrix holds its own half of the training rows.
    workers = result.worker_metrics_dataframe
    rows = workers.groupby("rank")["worker_train_rows"].last()
    assert sorted(rows.index) == [0, 1]
    assert rows[0] == rows[1] == len(train) // 2
    # ... and the workers boosted one model together: XGBoost's allreduce gives both
    # ranks the same training loss over all rows, every round.
    for _, rnd in workers.groupby("training_iteration"):
        assert rnd["train-logloss"].nunique() == 1

    # One report per round with every eval set's metrics as "<dataset>-<metric>".
    df = result.metrics_dataframe
    assert list(df["training_iteration"]) == list(range(1, 21))
    for key in ("train-logloss", "train-error", "validation-logloss", "validation-error"):
        assert df[key].notna().all(), key
    assert df["validation-logloss"].iloc[-1] < df["validation-logloss"].iloc[0]

    # Checkpoints every 5 rounds; the last one is the final 20-round model.
    assert [m["training_iteration"] for _, m in result.best_checkpoints] == [5, 10, 15, 20]
    assert sorted(n for n in os.listdir(result.path) if n.startswith("checkpoint_")) == [
        f"checkpoint_{i:06d}" for i in range(4)]
    booster = XGBoostTrainer.get_model(result.checkpoint)
    assert booster.num_boosted_rounds() == 20
    assert result.checkpoint.get_model_card()["framework"] == "xgboost"

    # The predictor (and evaluate()) score the validation set from the checkpoint.
    predictor = XGBoostPredictor.from_checkpoint(result.checkpoint)
    scored = predictor.predict(valid.drop(columns=["target"]))
    accuracy = float(((scored["predictions"] > 0.5) == valid["target"]).mean())
    assert accuracy >= 0.93
    report = evaluate(result.checkpoint, valid)
    assert report["task"] == "classification"
    assert report["accuracy"] == pytest.approx(accuracy)


def test_50k_rows_distributed_logloss_matches_single_process(ray_start_4_cpus, tmp_path):
    # One categorical feature: the workers must agree on its categories' codes.
    train, valid = synthetic(50_000, 10_000, categorical=True)
    params = {"objective": "binary:logistic", "eval_metric": "logloss",
              "tree_method": "hist", "max_depth": 6, "eta": 0.3}
    rounds = 30
    result = XGBoostTrainer(
        datasets={"train": train, "validation": valid}, label_column="label",
        params=params, num_boost_round=rounds, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0)).fit()
    log = {}
    x_valid = valid.drop(columns=["label"])
    single_model = xgboost.train(
        dict(params, nthread=2),
        xgboost.DMatrix(train.drop(columns=["label"]), label=train["label"],
                        enable_categorical=True),
        num_boost_round=rounds,
        evals=[(xgboost.DMatrix(x_valid, label=valid["label"], enable_categorical=True),
                "validation")],
        evals_result=log, verbose_eval=False)
    single = log["validation"]["logloss"][-1]
    distributed = result.metrics["validation-logloss"]
    assert abs(distributed - single) / single <= 0.02, (distributed, single)
    # The predictor maps category names (here given as text) to the model's codes.
    predicted = XGBoostPredictor.from_checkpoint(result.checkpoint).predict(
        x_valid.assign(f0=x_valid["f0"].astype(str)))["predictions"]
    booster = XGBoostTrainer.get_model(result.checkpoint)
    np.testing.assert_allclose(
        predicted, booster.predict(xgboost.DMatrix(x_valid, enable_categorical=True)),
        rtol=1e-6)
    single_predicted = single_model.predict(xgboost.DMatrix(x_valid, enable_categorical=True))
    accuracy = float(((predicted > 0.5) == valid["label"]).mean())
    single_accuracy = float(((single_predicted > 0.5) == valid["label"]).mean())
    assert accuracy >= single_accuracy - 0.01, (accuracy, single_accuracy)


class SlowRounds(xgboost.callback.TrainingCallback):
    """Keeps rounds long enough for the driver to kill a worker mid-training."""

    def after_iteration(self, model, epoch, evals_log):
        import time

        time.sleep(0.15)
        return False


class KillRankAfter(Callback):
    """SIGKILLs ``rank``'s process once the checkpoint of round ``after`` is committed."""

    def __init__(self, rank: int, after: int) -> None:
        self.rank = rank
        self.after = after
        self.killed_pid = None

    def on_report(self, metrics, all_metrics):
        if self.killed_pid is None and metrics["training_iteration"] >= self.after:
            self.killed_pid = all_metrics[self.rank]["pid"]
            os.kill(self.killed_pid, signal.SIGKILL)


# Rank 0 also runs the attempt's collective tracker: killing it takes the tracker down
# with it, and the next attempt's rank 0 starts a new one.
@pytest.mark.parametrize("rank", [1, 0], ids=["rank1", "rank0_with_the_tracker"])
def test_sigkilled_worker_resumes_from_last_checkpoint(fresh_workers, tmp_path, rank):
    train, valid = synthetic(4_000, 1_000)
    killer = KillRankAfter(rank, after=10)
    result = XGBoostTrainer(
        datasets={"train": train, "validation": valid}, label_column="label",
        params={"objective": "binary:logistic", "eval_metric": "logloss", "max_depth": 3},
        num_boost_round=20, checkpoint_frequency=5, callbacks=[SlowRounds()],
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0, callbacks=[killer],
                             failure_config=FailureConfig(max_failures=1))).fit()
    assert killer.killed_pid is not None
    assert result.num_failures == 1
    # The restarted group continued from the last committed checkpoint (round 10, or
    # 15 if the driver had already committed it when the kill landed), not from scratch.
    resumed_from = 20 - result.metrics["iterations_since_restore"]
    assert resumed_from in (10, 15)
    assert result.metrics["training_iteration"] == 20
    assert killer.killed_pid not in {result.metrics["pid"]} | {
        m["pid"] for m in result.worker_history[-1]}
    assert XGBoostTrainer.get_model(result.checkpoint).num_boosted_rounds() == 20
    assert list(result.metrics_dataframe["training_iteration"]) == list(range(1, 21))


_DRIVER = """
import json, sys
from engine import RunConfig, ScalingConfig
from engine.xgboost import XGBoostTrainer

train, valid, storage = sys.argv[1:4]
result = XGBoostTrainer(
    datasets={"train": train, "validation": valid}, label_column="label",
    params={"objective": "binary:logistic", "eval_metric": "logloss", "max_depth": 3},
    num_boost_round=5, scaling_config=ScalingConfig(num_workers=2),
    run_config=RunConfig(storage_path=storage, verbose=0)).fit()
print(json.dumps({"driver_imported_xgboost": "xgboost" in sys.modules,
                  "rounds": result.metrics["training_iteration"],
                  "logloss": result.metrics["validation-logloss"],
                  "checkpoint": result.checkpoint.path}))
"""


def test_a_fit_imports_no_xgboost_in_the_driver(ray_start_4_cpus, tmp_path):
    """The workers import XGBoost and rank 0 runs the tracker: a script that only
    trains never pays XGBoost's import (scikit-learn's with it) in its own process."""
    import json
    import subprocess
    import sys

    import ray

    rows = pd.concat(synthetic(2_000, 500)).sample(frac=1.0, random_state=0)  # mixed classes
    rows.iloc[:2_000].to_parquet(tmp_path / "train.parquet", index=False)
    rows.iloc[2_000:].to_parquet(tmp_path / "valid.parquet", index=False)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, RAY_ADDRESS=ray.get_runtime_context().gcs_address,
               PYTHONPATH=os.pathsep.join(p for p in [repo, os.environ.get("PYTHONPATH")]
                                          if p))
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(tmp_path / "train.parquet"),
         str(tmp_path / "valid.parquet"), str(tmp_path / "runs")],
        env=env, cwd=repo, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["driver_imported_xgboost"] is False
    assert out["rounds"] == 5
    assert 0 < out["logloss"] < 0.69  # it learned: better than a coin's log loss
    from engine import Checkpoint

    model = XGBoostTrainer.get_model(Checkpoint.from_directory(out["checkpoint"]))
    assert model.num_boosted_rounds() == 5


def _function_style_loop(config):
    from xgboost import collective

    from engine import get_checkpoint
    from engine.xgboost import ReportCallback

    shard = get_dataset_shard("train").materialize().to_pandas()
    dtrain = xgboost.DMatrix(shard.drop(columns=["target"]), label=shard["target"])
    start = ReportCallback.get_model(get_checkpoint())
    xgboost.train(config["params"], dtrain, num_boost_round=config["more_rounds"],
                  evals=[(dtrain, "train")], xgb_model=start,
                  callbacks=[ReportCallback(metrics={"loss": "train-logloss"}, extra_metrics={
                      "world_size": collective.get_world_size(),
                      "rows": int(dtrain.num_row())})])


def test_function_style_runs_in_the_collective_and_resumes(breast_cancer_fit, tmp_path):
    result, train, valid = breast_cancer_fit
    round_10 = result.best_checkpoints[1][0]
    resumed = XGBoostTrainer(
        _function_style_loop,
        train_loop_config={"params": dict(PARAMS, nthread=1), "more_rounds": 5},
        datasets={"train": train}, resume_from_checkpoint=round_10,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0,
                             checkpoint_config=CheckpointConfig(num_to_keep=1))).fit()
    assert resumed.metrics["world_size"] == 2
    assert resumed.metrics["rows"] == len(train) // 2
    assert resumed.metrics_dataframe["loss"].notna().all()
    assert resumed.metrics["training_iteration"] == 5
    final = XGBoostTrainer.get_model(resumed.checkpoint)
    assert final.num_boosted_rounds() == 15
    # The first 10 trees are the checkpoint's.
    x = xgboost.DMatrix(valid.drop(columns=["target"]))
    np.testing.assert_allclose(final[0:10].predict(x),
                               XGBoostTrainer.get_model(round_10).predict(x), rtol=1e-6)


def test_parquet_paths_are_read_by_the_workers_and_train_like_data_frames(
        breast_cancer_fit, tmp_path):
    """Local Parquet files go to each worker as a row range it reads itself (no Ray
    Data): the same equal split, and the same model quality as the DataFrame run."""
    import json

    result, train, valid = breast_cancer_fit
    train_path = tmp_path / "train.parquet"
    train.reset_index(drop=True).to_parquet(train_path, index=False, row_group_size=50)
    valid_dir = tmp_path / "valid"
    valid_dir.mkdir()
    valid.reset_index(drop=True).to_parquet(valid_dir / "part-0.parquet", index=False)
    from_files = XGBoostTrainer(
        datasets={"train": str(train_path), "validation": str(valid_dir)},
        label_column="target", params=PARAMS, num_boost_round=20,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path / "runs"), verbose=0)).fit()
    rows = [from_files.metrics["worker_train_rows"]] + [
        r["worker_train_rows"] for r in from_files.worker_history[-1]]
    assert rows == [len(train) // 2] * 2
    expected = result.metrics["validation-logloss"]
    assert abs(from_files.metrics["validation-logloss"] - expected) <= 0.05 * expected
    # Where the run's time went: the driver's and rank 0's steps, in the run record.
    with open(os.path.join(from_files.path, "run_state.json")) as f:
        timeline = json.load(f)["timeline"]
    assert {"ray_started", "workers_started", "training_finished"} <= {
        name for name, _ in timeline["driver"]}
    assert {"read_train", "matrices_built", "boosting_end"} <= {
        name for name, _ in timeline["rank0"]}


def test_bad_arguments_say_how_to_fix_them():
    train, valid = synthetic(100, 10)
    with pytest.raises(ConfigError, match="label_column"):
        XGBoostTrainer(datasets={"train": train}, params=PARAMS)
    with pytest.raises(ConfigError, match=r"datasets=\{'train'"):
        XGBoostTrainer(datasets={"validation": valid}, label_column="label")
    with pytest.raises(ConfigError, match="one or the other"):
        XGBoostTrainer(_function_style_loop, label_column="label", datasets={"train": train})
    with pytest.raises(ConfigError, match="evals"):
        XGBoostTrainer(datasets={"train": train}, label_column="label", evals=[])
    with pytest.raises(ConfigError, match="checkpoint_frequency"):
        XGBoostTrainer(datasets={"train": train}, label_column="label",
                       checkpoint_frequency=-1)
    with pytest.raises(ConfigError, match="num_boost_round"):
        XGBoostTrainer(datasets={"train": train}, label_column="label", num_boost_round=0)


def test_framework_packages_import_lightly_and_register_their_predictors():
    import subprocess
    import sys

    code = ("import sys, engine.xgboost, engine.lightgbm, engine.sklearn; "
            "print([m for m in ('xgboost', 'lightgbm', 'sklearn', 'torch') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
    from engine.lightgbm import LightGBMPredictor
    from engine.predict import get_predictor_class
    from engine.sklearn import SklearnPredictor

    assert get_predictor_class("xgboost") is XGBoostPredictor
    assert get_predictor_class("lightgbm") is LightGBMPredictor
    assert get_predictor_class("sklearn") is SklearnPredictor
