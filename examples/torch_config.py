"""Configuring Training: pass a ``config`` dict to ``train_func``.

From the seed pages train-configuring-and-results.rst, train-dl-guide.rst and
train-porting-code.rst, section "Configuring Training". (The seed prints
``result.metrics["num_epochs"]``, a key that is never reported; the value it shows, 1,
is the last ``epoch``.)
"""

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
print(result.metrics["epoch"])
# 1
assert result.metrics["epoch"] == 1
