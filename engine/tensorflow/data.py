"""Feeding a worker's dataset shard to Keras as a ``tf.data.Dataset``."""

from __future__ import annotations

from typing import Any, List, Optional, Union

from engine.exceptions import ConfigError

Columns = Union[str, List[str]]


def prepare_dataset_shard(dataset: Any) -> Any:
    """Turn off ``tf.distribute``'s auto-sharding of a ``tf.data.Dataset``.

    A worker's shard (``get_dataset_shard``) already holds only its part of the data;
    without this, ``MultiWorkerMirroredStrategy`` would shard it again and each worker
    would train on a fraction of its shard (and warn about it).
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options)


def to_tf(shard: Any, feature_columns: Columns, label_columns: Columns, *,
          batch_size: Optional[int] = None, worker_batch_size: Optional[int] = None,
          drop_last: bool = False, local_shuffle_buffer_size: Optional[int] = None,
          local_shuffle_seed: Optional[int] = None, **kwargs: Any) -> Any:
    """A ``tf.data.Dataset`` of ``(features, labels)`` batches from a dataset shard,
    ready for ``model.fit`` under ``MultiWorkerMirroredStrategy``.

    Under that strategy a dataset's batch is the *global* batch: each step, every
    worker trains on ``batch_size / world_size`` rows of its own shard. Give either
    ``batch_size`` (global) or ``worker_batch_size`` (per worker; the global batch is
    ``worker_batch_size * world_size``), as the porting guide says.

    Args:
        shard: ``engine.get_dataset_shard(name)`` (or a ``ray.data.Dataset``).
        feature_columns: A column name (its values are the model input) or a list of
            them (a dict input keyed by name).
        label_columns: The same for the labels.
        batch_size: The global batch size.
        worker_batch_size: The per-worker batch size, instead of ``batch_size``.
        drop_last, local_shuffle_buffer_size, local_shuffle_seed, **kwargs: Passed to
            Ray Data's ``to_tf``.

    Raises:
        ConfigError: Both or neither of the batch sizes, or one below 1.
    """
    if (batch_size is None) == (worker_batch_size is None):
        raise ConfigError("to_tf() takes batch_size (the global batch) or "
                          "worker_batch_size (per worker), exactly one of them.")
    if worker_batch_size is not None:
        batch_size = worker_batch_size * _world_size()
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"to_tf(): the batch size must be an int ≥ 1, got {batch_size!r}.")
    if not hasattr(shard, "to_tf"):
        raise ConfigError(
            f"to_tf() takes a dataset shard (engine.get_dataset_shard(name)), got "
            f"{type(shard).__name__}.")
    dataset = shard.to_tf(feature_columns=feature_columns, label_columns=label_columns,
                          batch_size=batch_size, drop_last=drop_last,
                          local_shuffle_buffer_size=local_shuffle_buffer_size,
                          local_shuffle_seed=local_shuffle_seed, **kwargs)
    return prepare_dataset_shard(dataset)


def _world_size() -> int:
    from engine._internal.worker_group.session import get_session

    session = get_session()
    return session.context.world_size if session is not None else 1
