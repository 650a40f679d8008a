"""Configuring checkpoints: keep the 2 checkpoints with the lowest "loss".

From the seed page train-dl-guide.rst, section "Logging, Checkpointing and Callbacks" >
"Configuring checkpoints" (the "N best" example). The seed reports ``loss=2`` as the
metric of every round; the printed result (checkpoints 0 and 2 kept) is the one for
reported losses 2, 4, 1, 3, which is what this script reports.
"""

from engine import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig, session
from engine.torch import TorchTrainer


def train_func():
    # first checkpoint
    session.report(dict(loss=2), checkpoint=Checkpoint.from_dict(dict(loss=2)))
    # second checkpoint
    session.report(dict(loss=4), checkpoint=Checkpoint.from_dict(dict(loss=4)))
    # third checkpoint
    session.report(dict(loss=1), checkpoint=Checkpoint.from_dict(dict(loss=1)))
    # fourth checkpoint
    session.report(dict(loss=3), checkpoint=Checkpoint.from_dict(dict(loss=3)))


# Keep the 2 checkpoints with the smallest "loss" value.
checkpoint_config = CheckpointConfig(
    num_to_keep=2, checkpoint_score_attribute="loss", checkpoint_score_order="min"
)

trainer = TorchTrainer(
    train_func,
    scaling_config=ScalingConfig(num_workers=2),
    run_config=RunConfig(checkpoint_config=checkpoint_config),
)
result = trainer.fit()
print(result.best_checkpoints[0][0].get_internal_representation())
# ('local_path', '/home/ubuntu/trainyard_results/TorchTrainer_.../checkpoint_000000')
print(result.best_checkpoints[1][0].get_internal_representation())
# ('local_path', '/home/ubuntu/trainyard_results/TorchTrainer_.../checkpoint_000002')

assert len(result.best_checkpoints) == 2
paths = [ckpt.get_internal_representation()[1] for ckpt, _ in result.best_checkpoints]
assert paths[0].rstrip("/").endswith("checkpoint_000000"), paths
assert paths[1].rstrip("/").endswith("checkpoint_000002"), paths
assert [metrics["loss"] for _, metrics in result.best_checkpoints] == [2, 1]
assert [ckpt.to_dict()["loss"] for ckpt, _ in result.best_checkpoints] == [2, 1]
# The latest checkpoint (loss 3) is kept too, as the run's last checkpoint.
assert result.checkpoint.to_dict()["loss"] == 3
