"""Ray Tune's legacy function API: tune.run() -> ExperimentAnalysis, tune.with_parameters,
the sampling helpers, tune.report/get_checkpoint with checkpoints in a function trainable."""

import os
import tempfile

import numpy as np

from engine import tune
from engine.tune import Checkpoint


def trainable(config, data=None):
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = int(open(os.path.join(d, "step")).read()) + 1
    for step in range(start, 4):
        loss = float(np.abs(data - config["lr"]).mean()) + config["noise"] * 0 + 1 / (step + 1)
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "step"), "w") as f:
                f.write(str(step))
            tune.report({"loss": loss, "units": config["units"], "wd": config["wd"]},
                        checkpoint=Checkpoint.from_directory(tmp))


data = np.full(1000, 0.5)
analysis = tune.run(
    tune.with_parameters(trainable, data=data),
    config={"lr": tune.grid_search([0.1, 0.5]), "units": tune.qrandint(8, 64, 8),
            "wd": tune.qloguniform(1e-4, 1e-1, 1e-4), "noise": tune.randn(0, 1),
            "double_lr": tune.sample_from(lambda spec: spec.config.lr * 2)},
    num_samples=1, stop={"training_iteration": 3}, metric="loss", mode="min", verbose=0)

assert analysis.best_config["lr"] == 0.5, analysis.best_config
assert analysis.best_config["double_lr"] == 1.0
assert analysis.best_result["training_iteration"] == 3
assert analysis.best_config["units"] % 8 == 0 and 8 <= analysis.best_config["units"] <= 64
df = analysis.dataframe()
assert len(df) == 2 and "loss" in df.columns and "config/lr" in df.columns
best_ckpt = analysis.get_best_checkpoint(analysis.best_trial, metric="loss", mode="min")
with best_ckpt.as_directory() as d:
    assert open(os.path.join(d, "step")).read() == "2"  # stopped after 3 reports
try:
    tune.run(trainable, config={}, not_an_argument=1)
except ValueError as exc:
    assert "not_an_argument" in str(exc)
else:
    raise AssertionError("an unknown tune.run() argument must be refused")
print("OK")
