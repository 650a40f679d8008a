"""HorovodTrainer: data-parallel training with Horovod (Gloo) on the engine's workers."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from engine.checkpoint import Checkpoint
from engine.config import DataConfig, RunConfig, ScalingConfig
from engine.exceptions import ConfigError
from engine.horovod.config import HorovodConfig, require_horovod
from engine.trainer import DataParallelTrainer


class HorovodTrainer(DataParallelTrainer):
    """Runs ``train_loop_per_worker`` on every worker with Horovod's environment set.

    The driver starts Horovod's Gloo rendezvous server for each attempt and gives every
    worker its rank, size, local and cross ranks and the server's address, so
    ``hvd.init()`` works in ``train_loop_per_worker``; use ``hvd.DistributedOptimizer``
    and ``hvd.broadcast_parameters`` as in any Horovod script. A function written for
    Horovod's own ``horovod.ray.RayExecutor`` runs unchanged.

    Args:
        train_loop_per_worker: ``f(config)`` or ``f()``.
        train_loop_config: Its ``config``.
        horovod_config: Gloo interfaces and timeout (:class:`HorovodConfig`).
        tensorflow_backend: The seed pages' spelling of ``horovod_config``
            (``HorovodTrainer(f, tensorflow_backend=HorovodConfig())``); give one of them.
        scaling_config, run_config, datasets, dataset_config, resume_from_checkpoint,
        metadata, preprocessor: As for :class:`engine.trainer.DataParallelTrainer`.

    Raises:
        ImportError: horovod is not installed (the message gives the install command).
    """

    # Horovod drives torch, TensorFlow or Keras models: the model card names no
    # framework, so any predictor may load its checkpoints.
    _framework = "generic"

    def __init__(self, train_loop_per_worker: Callable, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 horovod_config: Optional[HorovodConfig] = None,
                 tensorflow_backend: Optional[HorovodConfig] = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 preprocessor: Optional[Any] = None) -> None:
        require_horovod()
        if tensorflow_backend is not None:
            if horovod_config is not None:
                raise ConfigError("HorovodTrainer got horovod_config and tensorflow_backend "
                                  "(the seed's name for the same thing): pass one.")
            horovod_config, name = tensorflow_backend, "tensorflow_backend"
        else:
            name = "horovod_config"
        if horovod_config is not None and not isinstance(horovod_config, HorovodConfig):
            raise ConfigError(
                f"{name} must be an engine.horovod.HorovodConfig, got "
                f"{type(horovod_config).__name__}."
            )
        super().__init__(
            train_loop_per_worker, train_loop_config=train_loop_config,
            scaling_config=scaling_config, run_config=run_config,
            backend_config=horovod_config or HorovodConfig(),
            datasets=datasets, dataset_config=dataset_config,
            resume_from_checkpoint=resume_from_checkpoint, metadata=metadata,
            preprocessor=preprocessor,
        )
