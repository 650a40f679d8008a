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
           "ReportCallback"]


def __getattr__(name: str) -> Any:
    if name == "ReportCallback":  # subclasses xgboost's TrainingCallback: imports xgboost
        from engine.xgboost.config import import_xgboost

        import_xgboost()
        from engine.xgboost.callback import ReportCallback

        return ReportCallback
    raise AttributeError(f"module 'engine.xgboost' has no attribute {name!r}")
