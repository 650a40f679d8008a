"""LightGBMPredictor: a ``lightgbm.Booster`` from a checkpoint, scoring batches."""

from __future__ import annotations

import re
from typing import Any, Dict, Optional, Sequence

import numpy as np

from engine._internal.gbdt import ModelFeatureNames, features_frame
from engine.checkpoint import Checkpoint
from engine.exceptions import ConfigError
from engine.lightgbm.checkpoint import load_booster
from engine.lightgbm.config import import_lightgbm
from engine.predict import Predictor

_AUTO_NAME = re.compile(r"Column_\d+$")  # what LightGBM calls unnamed features


class LightGBMPredictor(ModelFeatureNames, Predictor):
    """Scores batches with a booster: ``predict(df)`` adds a ``"predictions"`` column
    (``binary``: the probability of class 1; ``multiclass``: one array of class
    probabilities per row; regression: the value).

    Feature columns: those given, else the model card's, else the names the booster was
    trained with (when the batch has them all: LightGBM replaces spaces and some
    punctuation in names), else every column but the label.

    Args:
        model: The ``lightgbm.Booster``.
        preprocessor: Applied to each batch first.
        predict_kwargs: Passed to ``Booster.predict`` (e.g. ``{"raw_score": True}``).
    """

    framework = "lightgbm"

    def __init__(self, model: Any, preprocessor: Optional[Any] = None,
                 model_card: Optional[Dict[str, Any]] = None,
                 feature_columns: Optional[Sequence[str]] = None,
                 predict_kwargs: Optional[Dict[str, Any]] = None) -> None:
        lightgbm = import_lightgbm()
        if not isinstance(model, lightgbm.Booster):
            raise ConfigError(f"LightGBMPredictor(model=...) takes a lightgbm.Booster, got "
                              f"{type(model).__name__}.")
        names = model.feature_name()
        if not names or all(_AUTO_NAME.match(n) for n in names):
            names = None  # trained without names: the card or the batch decides
        super().__init__(preprocessor, model_card, feature_columns)
        self._model_features = names
        self.model = model
        self.predict_kwargs = dict(predict_kwargs or {})

    @classmethod
    def _from_checkpoint(cls, checkpoint: Checkpoint, filename: Optional[str] = None,
                         predict_kwargs: Optional[Dict[str, Any]] = None
                         ) -> "LightGBMPredictor":
        """Args: ``filename`` (the model file; default ``model.txt``), ``predict_kwargs``."""
        return cls(load_booster(checkpoint, filename), predict_kwargs=predict_kwargs)

    def _predict_numpy(self, features: Dict[str, np.ndarray]) -> np.ndarray:
        return self.model.predict(features_frame(features), **self.predict_kwargs)
