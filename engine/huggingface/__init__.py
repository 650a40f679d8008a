"""Hugging Face: ``TransformersTrainer`` (alias ``HuggingFaceTrainer``), ``AccelerateTrainer``
and ``TransformersPredictor``.

    from engine.huggingface import TransformersTrainer, AccelerateTrainer

Importing this package imports torch (the trainers are TorchTrainers) but neither
transformers nor accelerate: the workers import them, and so do the predictor and
``TrainReportCallback`` when first used. Install with ``pip install
'trainyard[huggingface]'``.
"""

from __future__ import annotations

from typing import Any

from engine.huggingface.accelerate_trainer import AccelerateTrainer
from engine.huggingface.predictor import TransformersPredictor
from engine.huggingface.transformers_trainer import HuggingFaceTrainer, TransformersTrainer


def __getattr__(name: str) -> Any:
    if name == "TrainReportCallback":  # a transformers.TrainerCallback: imports transformers
        from engine.huggingface.callback import TrainReportCallback

        return TrainReportCallback
    raise AttributeError(f"module 'engine.huggingface' has no attribute {name!r}")


__all__ = ["TransformersTrainer", "HuggingFaceTrainer", "AccelerateTrainer",
           "TransformersPredictor", "TrainReportCallback"]
