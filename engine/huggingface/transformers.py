"""Ray Train's ``ray.train.huggingface.transformers``: ``RayTrainReportCallback`` and
``prepare_trainer`` for a ``transformers.Trainer`` run in a ``TorchTrainer`` loop.

    from engine.huggingface.transformers import RayTrainReportCallback, prepare_trainer

    trainer = transformers.Trainer(...)
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    trainer.train()

Importing this module does not import transformers; ``RayTrainReportCallback`` does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RayTrainReportCallback", "prepare_trainer"]


def prepare_trainer(trainer: Any) -> Any:
    """Make a ``transformers.Trainer`` train on this worker's part of the data.

    A dataset shard from ``engine.get_dataset_shard()`` given as ``train_dataset`` or
    ``eval_dataset`` becomes an in-memory torch dataset of its rows; the training shard
    is then read whole by this rank (the engine already split it, so Accelerate must not
    split it again). A torch ``Dataset`` is left as it is: Accelerate splits it across
    the ranks, as it does under Ray.

    Args:
        trainer: The ``transformers.Trainer``.

    Returns:
        The same trainer.
    """
    from engine.huggingface.transformers_trainer import (ShardDataset,
                                                         _train_on_local_shard)

    if _is_shard(getattr(trainer, "train_dataset", None)):
        trainer.train_dataset = ShardDataset.from_iterator(trainer.train_dataset)
        _train_on_local_shard(trainer)
    if _is_shard(getattr(trainer, "eval_dataset", None)):
        trainer.eval_dataset = ShardDataset.from_iterator(trainer.eval_dataset)
    return trainer


def _is_shard(data: Any) -> bool:
    """A dataset shard (a Ray Data iterator or dataset), not a torch dataset."""
    return data is not None and hasattr(data, "iter_rows") and not hasattr(data, "__getitem__")


def __getattr__(name: str) -> Any:
    if name == "RayTrainReportCallback":  # a transformers.TrainerCallback
        from engine.huggingface.callback import TrainReportCallback

        return TrainReportCallback
    raise AttributeError(f"module 'engine.huggingface.transformers' has no attribute "
                         f"{name!r}")
