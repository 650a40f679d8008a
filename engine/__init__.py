"""trainyard's training engine: the Ray Train / AIR programming model on Ray core.

    from engine import ScalingConfig, report
    from engine.torch import TorchTrainer

Heavy frameworks (torch, tensorflow, xgboost, …) are imported by their subpackages only.
"""

from __future__ import annotations

from engine import session
from engine._internal.worker_group.pool import reuse_workers
from engine.checkpoint import Checkpoint
from engine.config import (CheckpointConfig, DataConfig, FailureConfig, RunConfig,
                           ScalingConfig)
from engine.exceptions import (CheckpointError, ConfigError, StorageError,
                               TrainingFailedError, TrainyardError, WorkerError,
                               WorkerGroupStartupError)
from engine.result import Result
from engine.session import (get_checkpoint, get_context, get_dataset_shard, local_rank,
                            report, save_checkpoint, world_rank, world_size)

__version__ = "0.1.0"

__all__ = [
    "ScalingConfig", "RunConfig", "CheckpointConfig", "FailureConfig", "DataConfig",
    "Checkpoint", "Result", "report", "get_checkpoint", "get_context", "get_dataset_shard",
    "session", "save_checkpoint", "world_rank", "local_rank", "world_size",
    "TrainyardError", "TrainingFailedError", "ConfigError", "StorageError",
    "CheckpointError", "WorkerError", "WorkerGroupStartupError", "reuse_workers",
]
