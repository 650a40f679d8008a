"""LightGBM: ``LightGBMTrainer`` (data-parallel over LightGBM's socket network) and
``LightGBMPredictor``.

Importing this package does not import lightgbm; fitting, predicting or loading a
model does (``pip install 'trainyard[lightgbm]'``).
"""

from __future__ import annotations

from engine.lightgbm.callback import ReportCallback
from engine.lightgbm.checkpoint import LightGBMCheckpoint
from engine.lightgbm.config import LightGBMConfig, get_network_params
from engine.lightgbm.predictor import LightGBMPredictor
from engine.lightgbm.trainer import LightGBMTrainer

from engine.lightgbm.checkpoint import MODEL_FILE as _MODEL_FILE

# Ray's name (ray.train.lightgbm.RayTrainReportCallback), with its CHECKPOINT_NAME.
RayTrainReportCallback = ReportCallback
if not hasattr(ReportCallback, "CHECKPOINT_NAME"):
    ReportCallback.CHECKPOINT_NAME = _MODEL_FILE

__all__ = ["LightGBMTrainer", "LightGBMConfig", "LightGBMCheckpoint", "LightGBMPredictor",
           "ReportCallback", "RayTrainReportCallback", "get_network_params"]
