"""The session API used inside ``train_func`` (also reachable as ``engine.session``).

Spellings of several generations of the Ray AIR API are kept: ``session.report``,
``session.get_checkpoint``, ``session.get_world_rank`` … all mean the same.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from engine._internal.worker_group.session import TrainContext, require_session


def report(metrics: Dict[str, Any], checkpoint: Optional[Any] = None) -> None:
    """Report metrics (and optionally a checkpoint) for this round.

    Every worker must call ``report()`` the same number of times. Only rank 0's metrics
    become ``Result.metrics``; every rank's are kept in the run record. When several
    ranks pass a checkpoint in the same round their directories are merged (a file name
    written by more than one rank keeps rank 0's copy).

    Args:
        metrics: int/float/bool/str/None values, or nested dicts and lists of those.
        checkpoint: An ``engine.Checkpoint`` to save with this round.

    Raises:
        TypeError: A metric value is a tensor, array or other object; the key is named.
    """
    require_session("report").report(metrics, checkpoint)


def get_checkpoint():
    """The latest committed checkpoint of this run (or the one to resume from), or None."""
    return require_session("get_checkpoint").checkpoint


def get_context() -> TrainContext:
    """Rank, world size, local rank, node rank and trial name of this worker."""
    return require_session("get_context").context


def get_dataset_shard(dataset_name: Optional[str] = None):
    """This worker's shard of a dataset passed to the trainer's ``datasets=``.

    Args:
        dataset_name: The key in ``datasets``; may be omitted when there is only one.

    Raises:
        KeyError: The name was not passed; the message lists the names that were.
    """
    session = require_session("get_dataset_shard")
    shards = session.dataset_shards
    if dataset_name is None:
        if len(shards) == 1:
            return next(iter(shards.values()))
        raise KeyError(
            "get_dataset_shard() needs a dataset name when the trainer was given "
            f"{len(shards)} datasets: {sorted(shards)}."
        )
    if dataset_name not in shards:
        raise KeyError(
            f"get_dataset_shard({dataset_name!r}): no dataset of that name was passed to the "
            f"trainer. Passed: {sorted(shards) or 'none'} (Trainer(datasets={{...}}))."
        )
    return shards[dataset_name]


def get_world_rank() -> int:
    return get_context().get_world_rank()


def get_local_rank() -> int:
    return get_context().get_local_rank()


def get_world_size() -> int:
    return get_context().get_world_size()


def get_local_world_size() -> int:
    return get_context().get_local_world_size()


def get_node_rank() -> int:
    return get_context().get_node_rank()


def get_trial_name() -> str:
    return get_context().get_trial_name()


def get_trial_id() -> str:
    return get_context().get_trial_id()


def get_trial_dir() -> str:
    return get_context().get_trial_dir()


def get_trial_resources():
    return get_context().get_trial_resources()


def get_experiment_name() -> str:
    return get_context().get_experiment_name()


def save_checkpoint(**state: Any) -> None:
    """Older spelling: report a dict checkpoint of ``state``.

    The plain scalar entries of ``state`` (e.g. ``epoch``) are reported as the round's
    metrics, so they can rank checkpoints.
    """
    from engine.checkpoint import Checkpoint

    metrics = {k: v for k, v in state.items() if isinstance(v, (int, float, bool, str))}
    report(metrics, checkpoint=Checkpoint.from_dict(dict(state)))


# Oldest spellings (``train.world_rank()`` …).
world_rank = get_world_rank
local_rank = get_local_rank
world_size = get_world_size
