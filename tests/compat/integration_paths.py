"""Ray >= 2.7 module paths, with only the import prefixes rewritten."""

import os
import tempfile

from engine import RunConfig, ScalingConfig
from engine import tune
from engine.huggingface.transformers import RayTrainReportCallback as HFCallback
from engine.huggingface.transformers import prepare_trainer
from engine.integrations.mlflow import MLflowLoggerCallback, setup_mlflow
from engine.lightgbm import RayTrainReportCallback as LGBMCallback
from engine.tune.logger import (CSVLoggerCallback, JsonLoggerCallback, LoggerCallback,
                                TBXLoggerCallback)
from engine.tune.schedulers import ASHAScheduler, AsyncHyperBandScheduler
from engine.tune.search.optuna import OptunaSearch
from engine.xgboost import RayTrainReportCallback as XGBCallback

import transformers

assert issubclass(HFCallback, transformers.TrainerCallback)
assert XGBCallback.CHECKPOINT_NAME == "model.ubj" and callable(XGBCallback.get_model)
assert LGBMCallback.CHECKPOINT_NAME == "model.txt" and callable(LGBMCallback.get_model)
assert AsyncHyperBandScheduler is ASHAScheduler
assert callable(prepare_trainer)

tracking = tempfile.mkdtemp()
tracking_uri = f"sqlite:///{os.path.join(tracking, 'workers.db')}"
driver_uri = f"sqlite:///{os.path.join(tracking, 'driver.db')}"


def objective(config):
    mlflow = setup_mlflow(config, tracking_uri=tracking_uri, experiment_name="compat",
                          create_experiment_if_not_exists=True)
    for step in range(3):
        tune.report({"loss": config["x"] / (step + 1)})
        mlflow.log_metric("loss", config["x"] / (step + 1), step=step)
    mlflow.end_run()


class Collect(LoggerCallback):
    def __init__(self):
        self.results = []

    def log_trial_result(self, iteration, trial, result):
        self.results.append(result["loss"])


collect = Collect()
tuner = tune.Tuner(
    objective, param_space={"x": tune.uniform(0, 1)},
    # One trial at a time: both write to one sqlite MLflow store.
    tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=2,
                                max_concurrent_trials=1,
                                search_alg=OptunaSearch(seed=0),
                                scheduler=AsyncHyperBandScheduler(grace_period=1, max_t=3)),
    run_config=RunConfig(verbose=0, callbacks=[
        collect, JsonLoggerCallback(), CSVLoggerCallback(), TBXLoggerCallback(),
        MLflowLoggerCallback(tracking_uri=driver_uri, experiment_name="compat-driver")]))
grid = tuner.fit()
assert grid.num_errors == 0, grid.errors
# The first trial reports 3 times; ASHA may stop the second at its first rung.
assert len(collect.results) in (4, 6), collect.results
for result in grid:
    files = os.listdir(result.path)
    assert "result.json" in files and "progress.csv" in files, files
    assert any(f.startswith("events.out.tfevents") for f in files), files

import mlflow

mlflow.set_tracking_uri(tracking_uri)
runs = mlflow.search_runs(experiment_names=["compat"])
assert len(runs) == 2 and "params.x" in runs.columns, runs.columns
mlflow.set_tracking_uri(driver_uri)
assert len(mlflow.search_runs(experiment_names=["compat-driver"])) == 2
print("OK")
