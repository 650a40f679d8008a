"""Custom Callbacks: a ``LoggerCallback`` that collects every result.

From the seed page train-dl-guide.rst, section "Custom Callbacks". A plain ``fit()`` is
presented to callbacks as a single trial, so ``log_trial_result`` sees
``trial.last_result`` after each ``session.report``.
"""

from typing import Dict

from engine import RunConfig, ScalingConfig, session
from engine.callbacks import LoggerCallback
from engine.torch import TorchTrainer


# LoggerCallback is a higher level API of Callback.
class LoggingCallback(LoggerCallback):
    def __init__(self) -> None:
        self.results = []

    def log_trial_result(self, iteration: int, trial: "Trial", result: Dict):
        self.results.append(trial.last_result)


def train_func():
    for i in range(3):
        session.report({"epoch": i})


callback = LoggingCallback()
trainer = TorchTrainer(
    train_func,
    run_config=RunConfig(callbacks=[callback]),
    scaling_config=ScalingConfig(num_workers=2),
)
result = trainer.fit()

print("\n".join([str(x) for x in callback.results]))
# {'epoch': 0, 'training_iteration': 1, 'time_this_iter_s': ..., 'time_total_s': ...,
#  'timestamp': ..., 'date': '...', 'hostname': '...', 'node_ip': '...', 'pid': ...,
#  'iterations_since_restore': 1, 'time_since_restore': ..., 'trial_id': '...',
#  'experiment_id': '...', 'experiment_tag': '0', 'config': {}, 'done': False}
# {'epoch': 1, 'training_iteration': 2, ...}
# {'epoch': 2, 'training_iteration': 3, ...}

assert [r["epoch"] for r in callback.results] == [0, 1, 2]
assert [r["training_iteration"] for r in callback.results] == [1, 2, 3]
for r in callback.results:
    assert r["trial_id"] == result.metrics["trial_id"]
    assert r["config"] == {}
    for key in ("experiment_id", "date", "timestamp", "pid", "hostname", "node_ip"):
        assert key in r, key
