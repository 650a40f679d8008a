"""Ray Train/Tune idioms of the train context (issue 23, gap 7): get_trial_resources(),
get_trial_dir(), get_experiment_name() inside a Tuner, and workers starting in the
trial's directory so that relative paths of concurrent trials do not collide.

Ported from Ray by rewriting imports only: ray.train -> engine, ray.tune -> engine.tune.
"""

import os

from engine import RunConfig, ScalingConfig, get_context
import engine as train
from engine import tune
from engine.trainer import DataParallelTrainer

STORAGE = os.environ.get("TRAINYARD_STORAGE_PATH")


def train_func(config):
    ctx = get_context()
    # A relative path: each trial writes into its own directory.
    with open("artifact.txt", "w") as f:
        f.write(str(config["x"]))
    resources = ctx.get_trial_resources()
    train.report({
        "cwd": os.getcwd(), "trial_dir": ctx.get_trial_dir(),
        "experiment": ctx.get_experiment_name(),
        "cpus": resources.required_resources.get("CPU", 0), "bundles": len(resources.bundles),
    })


trainer = DataParallelTrainer(train_func, scaling_config=ScalingConfig(
    num_workers=2, resources_per_worker={"CPU": 0.5}))
tuner = tune.Tuner(
    trainer, param_space={"train_loop_config": {"x": tune.grid_search([1, 2])}},
    run_config=RunConfig(name="ctx_exp", storage_path=STORAGE, verbose=0))
grid = tuner.fit()
assert grid.num_errors == 0, grid.errors
dirs = set()
for result in grid:
    m = result.metrics
    assert m["experiment"] == "ctx_exp", m["experiment"]
    assert m["trial_dir"] == result.path and os.path.samefile(m["cwd"], result.path)
    assert m["cpus"] == 1.0 and m["bundles"] == 3, m
    assert open(os.path.join(result.path, "artifact.txt")).read() == \
        str(result.config["train_loop_config"]["x"])
    dirs.add(result.path)
assert len(dirs) == 2

# RAY_CHDIR_TO_TRIAL_DIR=0 (or TRAINYARD_CHDIR_TO_TRIAL_DIR=0) keeps the start directory.
os.environ["RAY_CHDIR_TO_TRIAL_DIR"] = "0"
here = os.getcwd()


def where(config):
    train.report({"cwd": os.getcwd(), "experiment": get_context().get_experiment_name()})


result = DataParallelTrainer(where, run_config=RunConfig(name="single", verbose=0)).fit()
assert result.metrics["cwd"] != result.path
assert result.metrics["experiment"] == "single"
print("OK")
