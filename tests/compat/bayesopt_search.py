"""Ray Tune's BayesOptSearch, and a Repeater that runs each config over 2 seeds and
hands the searcher their mean."""

from engine import RunConfig
from engine import tune
from engine.tune import TuneConfig, Tuner
from engine.tune.search import Repeater
from engine.tune.search.bayesopt import BayesOptSearch


def objective(config):
    noise = 0.01 * (config["__trial_index__"] - 0.5)  # the repeats differ a little
    tune.report({"score": -((config["x"] - 1.5) ** 2 + (config["y"] + 0.5) ** 2) + noise})


searcher = Repeater(BayesOptSearch(random_search_steps=4, random_state=0), repeat=2)
grid = Tuner(
    objective,
    param_space={"x": tune.uniform(-5, 5), "y": tune.uniform(-5, 5)},
    tune_config=TuneConfig(metric="score", mode="max", search_alg=searcher, num_samples=16,
                           max_concurrent_trials=2),
    run_config=RunConfig(verbose=0),
).fit()
assert len(grid) == 16 and grid.num_errors == 0, grid.errors
pairs = {}
for r in grid:
    pairs.setdefault((r.config["x"], r.config["y"]), []).append(r.config["__trial_index__"])
assert all(sorted(v) == [0, 1] for v in pairs.values()) and len(pairs) == 8, pairs
assert grid.get_best_result().metrics["score"] > -2.0, grid.get_best_result().metrics
print("OK")
