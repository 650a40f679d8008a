"""Tuning a TorchTrainer: a grid over ``train_loop_config`` run ``num_samples`` times.

From the seed page train-dl-guide.rst, section "Hyperparameter tuning (Ray Tune)".
"""

from engine import ScalingConfig, session
from engine.torch import TorchTrainer
from engine.tune import TuneConfig, Tuner, grid_search


def train_func(config):
    # In this example, nothing is expected to change over epochs,
    # and the output metric is equivalent to the input value.
    for _ in range(config["num_epochs"]):
        session.report(dict(output=config["input"]))


trainer = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2))
tuner = Tuner(
    trainer,
    param_space={
        "train_loop_config": {
            "num_epochs": 2,
            "input": grid_search([1, 2, 3]),
        }
    },
    tune_config=TuneConfig(num_samples=5, metric="output", mode="max"),
)
result_grid = tuner.fit()
print(result_grid.get_best_result().metrics["output"])
# 3

assert len(result_grid) == 15 and result_grid.num_errors == 0
assert result_grid.get_best_result().metrics["output"] == 3
