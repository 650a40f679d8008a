"""TensorflowTrainer: data-parallel TensorFlow / Keras training on the worker group."""

from __future__ import annotations

import importlib.util
from typing import Any, Callable, Dict, Optional

from engine.checkpoint import Checkpoint
from engine.config import DataConfig, RunConfig, ScalingConfig
from engine.exceptions import ConfigError
from engine.tensorflow.config import INSTALL_HINT, TensorflowConfig
from engine.trainer import DataParallelTrainer


class TensorflowTrainer(DataParallelTrainer):
    """Runs ``train_loop_per_worker`` on every worker with ``TF_CONFIG`` set.

    Inside it, ``tf.distribute.MultiWorkerMirroredStrategy()`` connects the workers
    (build and compile the model in ``strategy.scope()``); ``tf.keras`` is Keras 2
    (``tf-keras``) there unless ``TensorflowConfig(legacy_keras=False)``.

    Args:
        train_loop_per_worker: ``f(config)`` or ``f()``.
        train_loop_config: Its ``config``.
        tensorflow_config: Worker setup (``tensorflow_backend`` is the older name).
        scaling_config, run_config, datasets, dataset_config, resume_from_checkpoint,
        metadata, preprocessor: As for :class:`engine.trainer.DataParallelTrainer`.

    Raises:
        ImportError: TensorFlow (or tf-keras, with ``legacy_keras``) is not installed.
        ConfigError: The backend config is not a :class:`TensorflowConfig`.
    """

    _framework = "tensorflow"
    _default_backend_config = TensorflowConfig

    def __init__(self, train_loop_per_worker: Callable, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 tensorflow_config: Optional[TensorflowConfig] = None,
                 tensorflow_backend: Optional[TensorflowConfig] = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 preprocessor: Optional[Any] = None) -> None:
        if tensorflow_config is not None and tensorflow_backend is not None:
            raise ConfigError("Pass tensorflow_config=... or its older name "
                              "tensorflow_backend=..., not both.")
        config = tensorflow_config or tensorflow_backend or TensorflowConfig()
        if not isinstance(config, TensorflowConfig):
            raise ConfigError(
                f"tensorflow_config must be an engine.tensorflow.TensorflowConfig, got "
                f"{type(config).__name__}.")
        _check_installed(config)
        super().__init__(
            train_loop_per_worker, train_loop_config=train_loop_config,
            scaling_config=scaling_config, run_config=run_config, backend_config=config,
            datasets=datasets, dataset_config=dataset_config,
            resume_from_checkpoint=resume_from_checkpoint, metadata=metadata,
            preprocessor=preprocessor,
        )

    def _worker_env(self) -> Dict[str, str]:
        env = super()._worker_env()
        env.update(self.backend_config.worker_env())
        return env


def _check_installed(config: TensorflowConfig) -> None:
    """Fail here, not in every worker, when the framework is missing (no import)."""
    missing = [name for name in ("tensorflow",) + (("tf_keras",) if config.legacy_keras
                                                   else ())
               if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f"TensorflowTrainer needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: {INSTALL_HINT}")
