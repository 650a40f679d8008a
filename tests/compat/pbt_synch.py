"""Ray Tune's PopulationBasedTraining(synch=True): every trial waits at each
perturbation point for the others; then the bottom quantile restarts from a top trial's
checkpoint (at that checkpoint's training_iteration) with a perturbed config."""

import json
import os
import tempfile

from engine import CheckpointConfig, RunConfig
from engine import tune
from engine.tune import Checkpoint, TuneConfig, Tuner
from engine.tune.schedulers import PopulationBasedTraining


def objective(config):
    state = {"step": 0, "total": 0.0}
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = json.load(open(os.path.join(d, "state.json")))
    while state["step"] < 8:
        state["step"] += 1
        state["total"] += config["lr"]
        with tempfile.TemporaryDirectory() as tmp:
            json.dump(state, open(os.path.join(tmp, "state.json"), "w"))
            tune.report({"total": state["total"], "step": state["step"]},
                        checkpoint=Checkpoint.from_directory(tmp))


pbt = PopulationBasedTraining(
    time_attr="training_iteration", perturbation_interval=3, quantile_fraction=0.5,
    hyperparam_mutations={"lr": [0.1, 0.5, 1.0]}, resample_probability=1.0, synch=True)
tuner = Tuner(
    objective,
    param_space={"lr": tune.grid_search([0.1, 0.5, 1.0, 0.1])},
    tune_config=TuneConfig(metric="total", mode="max", scheduler=pbt, seed=1),
    run_config=RunConfig(verbose=0, checkpoint_config=CheckpointConfig(num_to_keep=4)),
)
grid = tuner.fit()
assert grid.num_errors == 0, grid.errors
assert pbt.num_exploits >= 2, pbt.num_exploits
exploited = 0
for result in grid:
    # Every trial trains its 8 steps; an exploited one continues from the donor's step.
    assert result.metrics["step"] == 8, result.metrics
    policy = os.path.join(result.path, "pbt_policy.json")
    if not os.path.exists(policy):
        continue
    for exploit in json.load(open(policy)):
        exploited += 1
        # Synchronous: exploits happen only at the perturbation points, never at the end.
        assert exploit["training_iteration"] in (3, 4, 6, 7), exploit
        assert exploit["donor_training_iteration"] in (3, 4, 6, 7), exploit
        rows = result.metrics_dataframe
        after = rows[rows.index > rows.index[rows["training_iteration"]
                                             == exploit["training_iteration"]][0]]
        assert after["training_iteration"].iloc[0] == exploit["donor_training_iteration"] + 1
assert exploited == pbt.num_exploits
print("OK")
