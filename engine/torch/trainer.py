"""TorchTrainer: data-parallel PyTorch training (DDP) on the engine's worker group."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from engine.checkpoint import Checkpoint
from engine.config import DataConfig, RunConfig, ScalingConfig
from engine.torch.config import TorchConfig
from engine.trainer import DataParallelTrainer


class TorchTrainer(DataParallelTrainer):
    """Runs ``train_loop_per_worker`` on every worker with torch.distributed set up.

    Args:
        train_loop_per_worker: ``f(config)`` or ``f()``.
        train_loop_config: Its ``config``.
        torch_config: Process-group settings (``torch_backend`` is the older name).
        scaling_config, run_config, datasets, dataset_config, resume_from_checkpoint,
        metadata, preprocessor: As for :class:`engine.trainer.DataParallelTrainer`.
    """

    _framework = "torch"

    def __init__(self, train_loop_per_worker: Callable, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 torch_config: Optional[TorchConfig] = None,
                 torch_backend: Optional[TorchConfig] = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 preprocessor: Optional[Any] = None) -> None:
        super().__init__(
            train_loop_per_worker, train_loop_config=train_loop_config,
            scaling_config=scaling_config, run_config=run_config,
            backend_config=torch_config or torch_backend or TorchConfig(),
            datasets=datasets, dataset_config=dataset_config,
            resume_from_checkpoint=resume_from_checkpoint, metadata=metadata,
            preprocessor=preprocessor,
        )
