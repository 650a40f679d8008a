"""Ray Train idioms: RunConfig(stop=...) for a single fit() (dict, function, Stopper).

Ported from Ray by rewriting imports only: ray.train -> engine, ray.tune -> engine.tune.
"""

from engine import Checkpoint, RunConfig, ScalingConfig, TrainingFailedError
import engine as train
from engine.torch import TorchTrainer
from engine.tune.stopper import CombinedStopper, MaximumIterationStopper, TimeoutStopper
import os
import tempfile


def train_func(config):
    for epoch in range(20):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "epoch.txt"), "w") as f:
                f.write(str(epoch))
            train.report({"epoch": epoch, "mean_accuracy": epoch / 10},
                         checkpoint=Checkpoint.from_directory(tmp))


def fit(stop):
    trainer = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=1),
                           run_config=RunConfig(stop=stop, verbose=0))
    return trainer.fit()


def checkpoint_epoch(result):
    with result.checkpoint.as_directory() as d:
        return int(open(os.path.join(d, "epoch.txt")).read())


# A dict: stop when any metric reaches its value.
result = fit({"training_iteration": 10, "mean_accuracy": 0.5})
assert result.metrics["epoch"] == 5, result.metrics
assert result.error is None and checkpoint_epoch(result) == 5

# A function (trial_id, result) -> bool.
result = fit(lambda trial_id, r: r["epoch"] >= 3)
assert result.metrics["epoch"] == 3 and checkpoint_epoch(result) == 3

# Stoppers, combined.
result = fit(CombinedStopper(MaximumIterationStopper(max_iter=4), TimeoutStopper(600)))
assert result.metrics["training_iteration"] == 4

# A stop key that is never reported fails clearly.
try:
    fit({"accuracy": 0.9})
except TrainingFailedError as exc:
    assert "'accuracy'" in str(exc) and "not in the reported metrics" in str(exc), exc
else:
    raise AssertionError("an unknown stop key must fail the run")
print("OK")
