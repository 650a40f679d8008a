"""Configuring checkpoints: ``CheckpointConfig(num_to_keep=0)`` writes no checkpoint.

From the seed page train-dl-guide.rst, section "Logging, Checkpointing and Callbacks" >
"Configuring checkpoints" (the example that disables writing checkpoints to disk).
"""

import engine
from engine import CheckpointConfig, RunConfig, ScalingConfig
from engine.torch import TorchTrainer


def train_func():
    for epoch in range(3):
        engine.save_checkpoint(epoch=epoch)


checkpoint_config = CheckpointConfig(num_to_keep=0)

trainer = TorchTrainer(
    train_func,
    scaling_config=ScalingConfig(num_workers=2),
    run_config=RunConfig(checkpoint_config=checkpoint_config)
)
result = trainer.fit()

print(result.checkpoint)
# None

assert result.checkpoint is None
assert result.best_checkpoints == []
# save_checkpoint(epoch=...) still reports epoch as the round's metric.
assert result.metrics["epoch"] == 2
