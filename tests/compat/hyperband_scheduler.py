"""Ray Tune's synchronous HyperBandScheduler on a checkpointing function trainable:
brackets pause at their milestones, the best of each go on, the others stop."""

import json
import os
import tempfile

from engine import RunConfig
from engine import tune
from engine.tune import Checkpoint, TuneConfig, Tuner
from engine.tune.schedulers import HyperBandScheduler


def objective(config):
    step = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            step = json.load(open(os.path.join(d, "state.json")))["step"]
    while step < 20:
        step += 1
        with tempfile.TemporaryDirectory() as tmp:
            json.dump({"step": step}, open(os.path.join(tmp, "state.json"), "w"))
            tune.report({"score": config["quality"] * step, "step": step},
                        checkpoint=Checkpoint.from_directory(tmp))


hyperband = HyperBandScheduler(time_attr="training_iteration", max_t=9, reduction_factor=3)
tuner = Tuner(
    objective,
    param_space={"quality": tune.grid_search([1, 2, 3, 4, 5, 6, 7, 8])},
    tune_config=TuneConfig(metric="score", mode="max", scheduler=hyperband),
    run_config=RunConfig(verbose=0),
)
grid = tuner.fit()
assert grid.num_errors == 0, grid.errors
steps = {r.config["quality"]: r.metrics["step"] for r in grid}
# Bracket s=0 (qualities 1-3) runs to max_t=9; bracket s=1 (4-8) stops at its
# milestone 3 except its best ceil(5/3) = 2 (7 and 8), which run on to 9.
assert steps == {1: 9, 2: 9, 3: 9, 4: 3, 5: 3, 6: 3, 7: 9, 8: 9}, steps
# Paused trials resumed from their checkpoints: no step was trained twice.
for r in grid:
    assert list(r.metrics_dataframe["step"]) == list(range(1, r.metrics["step"] + 1)), \
        list(r.metrics_dataframe["step"])
assert grid.get_best_result().config["quality"] == 8
print("OK")
