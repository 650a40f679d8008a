"""TensorFlow: ``TensorflowTrainer`` (``TF_CONFIG`` for ``MultiWorkerMirroredStrategy``),
the Keras ``ReportCheckpointCallback``, checkpoints, the predictor and ``to_tf``.

Importing this package does not import TensorFlow: the trainer runs it in the workers,
and ``ReportCheckpointCallback`` (a Keras class) is loaded on first use.
"""

from __future__ import annotations

from typing import Any

from engine.tensorflow.checkpoint import TensorflowCheckpoint
from engine.tensorflow.config import TensorflowConfig
from engine.tensorflow.data import prepare_dataset_shard, to_tf
from engine.tensorflow.predictor import TensorflowPredictor
from engine.tensorflow.trainer import TensorflowTrainer

__all__ = [
    "TensorflowTrainer", "TensorflowConfig", "ReportCheckpointCallback",
    "TensorflowCheckpoint", "TensorflowPredictor", "to_tf", "prepare_dataset_shard",
]


def __getattr__(name: str) -> Any:
    if name == "ReportCheckpointCallback":  # subclasses a Keras class: imports TensorFlow
        from engine.tensorflow.keras import ReportCheckpointCallback

        return ReportCheckpointCallback
    raise AttributeError(f"module 'engine.tensorflow' has no attribute {name!r}")
