"""Ray Tune's HyperOptSearch wrapped in a ConcurrencyLimiter, with points_to_evaluate and
the sampling helpers it models."""

from engine import RunConfig
from engine import tune
from engine.tune import TuneConfig, Tuner
from engine.tune.search import ConcurrencyLimiter
from engine.tune.search.hyperopt import HyperOptSearch


def objective(config):
    loss = (config["x"] - 1.5) ** 2 + abs(config["n"] - 4) + (0 if config["act"] == "relu" else 1)
    tune.report({"loss": loss, "lr": config["lr"], "units": config["units"]})


space = {"x": tune.uniform(-5, 5), "n": tune.randint(1, 10),
         "act": tune.choice(["relu", "tanh"]), "lr": tune.qloguniform(1e-4, 1e-1, 1e-4),
         "units": tune.qrandint(16, 128, 16), "noise": tune.randn(0, 1), "fixed": 7}
searcher = ConcurrencyLimiter(
    HyperOptSearch(points_to_evaluate=[{"x": 0.0, "n": 5, "act": "relu", "lr": 0.01,
                                        "units": 32, "noise": 0.0}],
                   n_initial_points=5, random_state_seed=0),
    max_concurrent=2)
grid = Tuner(
    objective, param_space=space,
    tune_config=TuneConfig(metric="loss", mode="min", search_alg=searcher, num_samples=14),
    run_config=RunConfig(verbose=0),
).fit()
assert len(grid) == 14 and grid.num_errors == 0, grid.errors
configs = [r.config for r in grid]
assert any(c["x"] == 0.0 and c["n"] == 5 for c in configs)  # the point came first
assert all(c["fixed"] == 7 and c["units"] % 16 == 0 and 1 <= c["n"] <= 9 for c in configs)
assert grid.get_best_result().metrics["loss"] < 3.0, grid.get_best_result().metrics
print("OK")
