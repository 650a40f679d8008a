"""PyTorch distributed metrics: compute a metric in ``train_func`` and report it.

From the seed page train-dl-guide.rst, section "Example: PyTorch Distributed metrics".
The seed uses ``torchmetrics.functional.accuracy``; torchmetrics is not installed in
this project's environment, so the accuracy is computed with plain torch (the same
value: the share of argmax predictions equal to the target).
"""

import torch

from engine import ScalingConfig, session
from engine.torch import TorchTrainer


def train_func(config):
    preds = torch.randn(10, 5).softmax(dim=-1)
    target = torch.randint(5, (10,))
    accuracy = (preds.argmax(dim=-1) == target).float().mean().item()
    session.report({"accuracy": accuracy})


trainer = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2))
result = trainer.fit()
print(result.metrics["accuracy"])
# 0.20000000298023224

accuracy = result.metrics["accuracy"]
assert isinstance(accuracy, float) and 0.0 <= accuracy <= 1.0
# 10 samples: the accuracy is a multiple of 0.1.
assert abs(accuracy * 10 - round(accuracy * 10)) < 1e-5
