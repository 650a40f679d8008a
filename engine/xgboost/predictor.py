"""XGBoostPredictor: an ``xgboost.Booster`` from a checkpoint, scoring batches."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np

from engine._internal.gbdt import ModelFeatureNames, features_frame
from engine.checkpoint import Checkpoint
from engine.exceptions import ConfigError
from engine.predict import Predictor
from engine.xgboost.checkpoint import load_booster
from engine.xgboost.config import import_xgboost


class XGBoostPredictor(ModelFeatureNames, Predictor):
    """Scores batches with a booster: ``predict(df)`` adds a ``"predictions"`` column
    (``binary:logistic``: the probability of class 1; ``multi:softprob``: one array of
    class probabilities per row; regression: the value).

    Feature columns: those given, else the model card's, else the names the booster was
    trained with (when the batch has them all), else every column but the label.

    Args:
        model: The ``xgboost.Booster``.
        preprocessor: Applied to each batch first.
        predict_kwargs: Passed to ``Booster.predict`` (e.g. ``{"output_margin": True}``).
    """

    framework = "xgboost"

    def __init__(self, model: Any, preprocessor: Optional[Any] = None,
                 model_card: Optional[Dict[str, Any]] = None,
                 feature_columns: Optional[Sequence[str]] = None,
                 predict_kwargs: Optional[Dict[str, Any]] = None) -> None:
        xgboost = import_xgboost()
        if not isinstance(model, xgboost.Booster):
            raise ConfigError(f"XGBoostPredictor(model=...) takes an xgboost.Booster, got "
                              f"{type(model).__name__}.")
        super().__init__(preprocessor, model_card, feature_columns)
        self._model_features = getattr(model, "feature_names", None)
        self.model = model
        self.predict_kwargs = dict(predict_kwargs or {})

    @classmethod
    def _from_checkpoint(cls, checkpoint: Checkpoint, filename: Optional[str] = None,
                         predict_kwargs: Optional[Dict[str, Any]] = None
                         ) -> "XGBoostPredictor":
        """Args: ``filename`` (the model file; default ``model.ubj``), ``predict_kwargs``."""
        return cls(load_booster(checkpoint, filename), predict_kwargs=predict_kwargs)

    def _predict_numpy(self, features: Dict[str, np.ndarray]) -> np.ndarray:
        xgboost = import_xgboost()
        data = xgboost.DMatrix(features_frame(features), enable_categorical=True)
        return self.model.predict(data, **self.predict_kwargs)
