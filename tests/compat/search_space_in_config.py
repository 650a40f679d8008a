"""Ray Tune's Tuner guide: search spaces inside ScalingConfig in param_space. Each trial
gets its own ScalingConfig; a trainer fit() directly with one is a clear error."""

from engine import RunConfig, ScalingConfig, get_context, report
from engine import tune
from engine.trainer import DataParallelTrainer
from engine.tune import TuneConfig, Tuner


def train_func(config):
    ctx = get_context()
    report({"world_size": ctx.get_world_size(), "score": config["lr"]})


trainer = DataParallelTrainer(train_func, train_loop_config={"lr": 0.1},
                              scaling_config=ScalingConfig(num_workers=1))
tuner = Tuner(
    trainer,
    param_space={
        "scaling_config": ScalingConfig(num_workers=tune.grid_search([1, 2])),
        "train_loop_config": {"lr": tune.choice([0.1, 0.2])},
    },
    tune_config=TuneConfig(metric="score", mode="max", seed=0),
    run_config=RunConfig(verbose=0),
)
grid = tuner.fit()
assert grid.num_errors == 0, grid.errors
assert sorted(r.metrics["world_size"] for r in grid) == [1, 2]
for r in grid:
    assert r.metrics["config"]["lr"] in (0.1, 0.2)  # what the training function got
    # The trial's config holds the ScalingConfig it ran with.
    assert r.config["scaling_config"].num_workers == r.metrics["world_size"], r.config
    tag = r.metrics["experiment_tag"]
    assert f"num_workers={r.metrics['world_size']}" in tag, tag

# The same ScalingConfig given straight to a trainer: nothing resolves it.
try:
    DataParallelTrainer(train_func, train_loop_config={"lr": 0.1},
                        scaling_config=ScalingConfig(num_workers=tune.grid_search([1, 2])),
                        ).fit()
except Exception as exc:  # noqa: BLE001
    assert type(exc).__name__ == "ConfigError" and "param_space" in str(exc), exc
else:
    raise AssertionError("fit() accepted a search space in its ScalingConfig")
print("OK")
