"""Ray Tune's BOHB: HyperBandForBOHB with TuneBOHB over a ConfigSpace space, on a
function trainable."""

import ConfigSpace as CS

from engine import RunConfig
from engine import tune
from engine.tune import TuneConfig, Tuner
from engine.tune.schedulers.hb_bohb import HyperBandForBOHB
from engine.tune.search.bohb import TuneBOHB


def objective(config):
    for step in range(1, 10):
        loss = (config["x"] - 0.7) ** 2 + (0.0 if config["act"] == "relu" else 0.5) + 1 / step
        tune.report({"loss": loss})


space = CS.ConfigurationSpace(seed=0)
space.add([CS.Float("x", (0.0, 2.0)), CS.Categorical("act", ["relu", "tanh"])])
bohb = TuneBOHB(space=space, seed=0)
hyperband = HyperBandForBOHB(time_attr="training_iteration", max_t=9, reduction_factor=3)
grid = Tuner(
    objective,
    tune_config=TuneConfig(metric="loss", mode="min", search_alg=bohb, scheduler=hyperband,
                           num_samples=8),
    run_config=RunConfig(verbose=0),
).fit()
assert len(grid) == 8 and grid.num_errors == 0, grid.errors
iterations = sorted(r.metrics["training_iteration"] for r in grid)
# Bracket s=0 runs 3 trials to max_t; bracket s=1 keeps 2 of its 5 after milestone 3.
assert iterations == [3, 3, 3, 9, 9, 9, 9, 9], iterations
assert sorted(bohb._model.results) == [3, 9], "BOHB saw no budgeted results"
assert all(isinstance(r.config["x"], float) and r.config["act"] in ("relu", "tanh")
           for r in grid)

print("OK")
