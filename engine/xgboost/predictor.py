"""XGBoostPredictor: an ``xgboost.Booster`` from a checkpoint, scoring batches."""

from __future__ import annotations

from typing import Any

from engine._internal.gbdt.predictor import BoosterPredictor
from engine.xgboost.checkpoint import XGBoostCheckpoint
from engine.xgboost.config import import_xgboost


class XGBoostPredictor(BoosterPredictor):
    """Scores batches with a booster: ``predict(df)`` adds a ``"predictions"`` column
    (``binary:logistic``: the probability of class 1; ``multi:softprob``: one array of
    class probabilities per row; regression: the value).

    Feature columns: those given, else the model card's, else the names the booster was
    trained with (when the batch has them all), else every column but the label.

    Args:
        model: The ``xgboost.Booster`` (``from_checkpoint(ckpt, filename=...)`` loads
            ``model.ubj`` unless ``filename`` names another file).
        predict_kwargs: Passed to ``Booster.predict`` (e.g. ``{"output_margin": True}``).
        preprocessor, model_card, feature_columns: As for
            :class:`engine.predict.Predictor`.
    """

    framework = "xgboost"
    checkpoint_cls = XGBoostCheckpoint
    booster_text = "an xgboost.Booster"

    def _model_input(self, frame: Any) -> Any:
        return import_xgboost().DMatrix(frame, enable_categorical=True)
