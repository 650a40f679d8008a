"""LightGBMPredictor: a ``lightgbm.Booster`` from a checkpoint, scoring batches."""

from __future__ import annotations

import re
from typing import Any, List, Optional

from engine._internal.gbdt.predictor import BoosterPredictor
from engine.lightgbm.checkpoint import LightGBMCheckpoint

_AUTO_NAME = re.compile(r"Column_\d+$")  # what LightGBM calls unnamed features


class LightGBMPredictor(BoosterPredictor):
    """Scores batches with a booster: ``predict(df)`` adds a ``"predictions"`` column
    (``binary``: the probability of class 1; ``multiclass``: one array of class
    probabilities per row; regression: the value).

    Feature columns: those given, else the model card's, else the names the booster was
    trained with (when the batch has them all: LightGBM replaces spaces and some
    punctuation in names), else every column but the label.

    Args:
        model: The ``lightgbm.Booster`` (``from_checkpoint(ckpt, filename=...)`` loads
            ``model.txt`` unless ``filename`` names another file).
        predict_kwargs: Passed to ``Booster.predict`` (e.g. ``{"raw_score": True}``).
        preprocessor, model_card, feature_columns: As for
            :class:`engine.predict.Predictor`.
    """

    framework = "lightgbm"
    checkpoint_cls = LightGBMCheckpoint
    booster_text = "a lightgbm.Booster"

    def _feature_names(self, model: Any) -> Optional[List[str]]:
        names = model.feature_name()
        if not names or all(_AUTO_NAME.match(n) for n in names):
            return None  # trained without names: the card or the batch decides
        return names
