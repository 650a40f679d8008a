"""Ray Tune idioms: RunConfig(stop=...) applied to every trial of a Tuner."""

import time

from engine import tune
from engine import RunConfig
from engine.tune import Tuner, TuneConfig
from engine.tune.stopper import (ExperimentPlateauStopper, Stopper, TimeoutStopper,
                                 TrialPlateauStopper)


def objective(config):
    for step in range(30):
        score = min(step, config["cap"]) * config["scale"]
        tune.report({"score": score, "step": step})
        time.sleep(config.get("sleep", 0))


def run(stop, param_space, **tune_kwargs):
    tuner = Tuner(objective, param_space=param_space,
                  tune_config=TuneConfig(metric="score", mode="max", **tune_kwargs),
                  run_config=RunConfig(stop=stop, verbose=0))
    return tuner.fit()


space = {"scale": tune.grid_search([1, 2]), "cap": 100}

# A dict: every trial stops at its 5th report.
grid = run({"training_iteration": 5}, space)
assert [r.metrics["training_iteration"] for r in grid] == [5, 5]
assert grid.num_errors == 0 and grid.num_terminated == 2, grid.errors

# A function: trial-dependent.
grid = run(lambda trial_id, result: result["score"] >= 6, space)
assert sorted(r.metrics["step"] for r in grid) == [3, 6]

# A plateau per trial: the score stops changing at step 3.
grid = run(TrialPlateauStopper("score", std=0.001, num_results=3, grace_period=3),
           {"scale": 1, "cap": 3})
assert grid[0].metrics["step"] == 5, grid[0].metrics

# The experiment's top results plateau: every trial stops, no new one starts.
grid = run(ExperimentPlateauStopper("score", top=3, std=0.001, mode="max"),
           {"scale": 1, "cap": 2}, num_samples=3, max_concurrent_trials=1)
assert len(grid) == 1 and grid[0].metrics["step"] < 29, [r.metrics for r in grid]


# A user subclass.
class ScoreStopper(Stopper):
    def __call__(self, trial_id, result):
        return result["score"] > 10

    def stop_all(self):
        return False


grid = run(ScoreStopper(), space)
assert sorted(r.metrics["score"] for r in grid) == [11, 12]

# A timeout ends the experiment (stop_all).
start = time.time()
grid = run(TimeoutStopper(3), {"scale": 1, "cap": 100, "sleep": 1})
assert time.time() - start < 25 and grid[0].metrics["step"] < 29 and grid.num_errors == 0, grid.errors


# A stopper that raises fails the trial, naming the stopper.
class Broken(Stopper):
    def __call__(self, trial_id, result):
        raise KeyError("no such metric")


grid = run(Broken(), {"scale": 1, "cap": 1})
assert grid.num_errors == 1 and "Broken" in str(grid.errors[0]), grid.errors
print("OK")
