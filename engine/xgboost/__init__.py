"""XGBoost: ``XGBoostTrainer`` (data-parallel through XGBoost's collective) and
``XGBoostPredictor``.

Importing this package does not import xgboost; fitting, predicting, loading a model
or using ``ReportCallback`` does (``pip install 'trainyard[xgboost]'``).
"""

from __future__ import annotations

from typing import Any

from engine.xgboost.checkpoint import XGBoostCheckpoint
from engine.xgboost.config import XGBoostConfig
from engine.xgboost.predictor import XGBoostPredictor
from engine.xgboost.trainer import XGBoostTrainer

__all__ = ["XGBoostTrainer", "XGBoostConfig", "XGBoostCheckpoint", "XGBoostPredictor",
           "ReportCallback", "RayTrainReportCallback"]


def __getattr__(name: str) -> Any:
    # ReportCallback subclasses xgboost's TrainingCallback: imports xgboost.
    # RayTrainReportCallback is Ray's name for it (with CHECKPOINT_NAME and get_model).
    if name in ("ReportCallback", "RayTrainReportCallback"):
        from engine.xgboost.checkpoint import MODEL_FILE
        from engine.xgboost.config import import_xgboost

        import_xgboost()
        from engine.xgboost.callback import ReportCallback

        if not hasattr(ReportCallback, "CHECKPOINT_NAME"):
            ReportCallback.CHECKPOINT_NAME = MODEL_FILE
        return ReportCallback
    raise AttributeError(f"module 'engine.xgboost' has no attribute {name!r}")
