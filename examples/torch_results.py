"""Accessing Training Results: metrics, the metrics dataframe, checkpoints and log_dir.

From the seed pages train-configuring-and-results.rst and train-dl-guide.rst, sections
"Accessing Training Results" and "Log Directory Structure". The ``result`` is the one of
the "Configuring Training" example.
"""

from pprint import pprint

from engine import ScalingConfig, session
from engine.torch import TorchTrainer


def train_func(config):
    for i in range(config["num_epochs"]):
        session.report({"epoch": i})


trainer = TorchTrainer(
    train_func,
    train_loop_config={"num_epochs": 2},
    scaling_config=ScalingConfig(num_workers=2),
)
result = trainer.fit()

# The metrics of the last training iteration, with the automatic fields.
pprint(result.metrics)
# {'config': {'num_epochs': 2},
#  'date': '...',
#  'done': True,
#  'epoch': 1,
#  ...
#  'training_iteration': 2,
#  ...}

# The metrics of all iterations.
print(result.metrics_dataframe)

result.checkpoint  # last saved checkpoint (None here: nothing was saved)
result.best_checkpoints  # N best saved checkpoints, as configured in run_config
result.error  # the exception if training failed

# The run's directory for logs and checkpoints.
print(result.log_dir)

assert result.metrics["epoch"] == 1
assert result.metrics["training_iteration"] == 2
assert result.metrics["done"] is True
for key in ("time_this_iter_s", "time_total_s", "timestamp", "date", "hostname", "node_ip",
            "pid", "trial_id", "experiment_id", "experiment_tag", "config",
            "iterations_since_restore", "time_since_restore"):
    assert key in result.metrics, key
assert list(result.metrics_dataframe["epoch"]) == [0, 1]
assert result.checkpoint is None and result.best_checkpoints == []
assert result.error is None
assert result.log_dir == result.path and result.log_dir
