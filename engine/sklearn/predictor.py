"""SklearnPredictor: a fitted scikit-learn estimator from a checkpoint, scoring batches."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np

from engine._internal.gbdt import ModelFeatureNames, features_frame
from engine.checkpoint import Checkpoint
from engine.exceptions import CheckpointError, ConfigError
from engine.predictor import Predictor
from engine.sklearn.checkpoint import MODEL_FILE, load_estimator


class SklearnPredictor(ModelFeatureNames, Predictor):
    """Scores batches with ``estimator.predict`` (or ``predict_proba``): ``predict(df)``
    adds a ``"predictions"`` column.

    The estimator is a pickle: ``from_checkpoint(ckpt, allow_pickle=True)`` (and the same
    to ``BatchPredictor`` / ``evaluate()``) loads it; without it, loading is refused.

    Feature columns: those given, else the model card's, else the names the estimator
    was fitted with (``feature_names_in_``, when the batch has them all), else every
    column but the label.

    Args:
        estimator: A fitted estimator.
        preprocessor: Applied to each batch first.
        predict_proba: Output class probabilities (one array per row) instead of labels.
    """

    framework = "sklearn"

    def __init__(self, estimator: Any, preprocessor: Optional[Any] = None,
                 model_card: Optional[Dict[str, Any]] = None,
                 feature_columns: Optional[Sequence[str]] = None,
                 predict_proba: bool = False) -> None:
        method = "predict_proba" if predict_proba else "predict"
        if not callable(getattr(estimator, method, None)):
            raise ConfigError(f"SklearnPredictor: {type(estimator).__name__} has no "
                              f"{method}().")
        super().__init__(preprocessor, model_card, feature_columns)
        names = getattr(estimator, "feature_names_in_", None)
        self._model_features = [str(n) for n in names] if names is not None else None
        self.estimator = estimator
        self._method = method

    @classmethod
    def _from_checkpoint(cls, checkpoint: Checkpoint, predict_proba: bool = False,
                         allow_pickle: bool = False) -> "SklearnPredictor":
        """Args: ``predict_proba``; ``allow_pickle=True`` is required: the estimator is a
        pickle (``model.pkl``), and unpickling runs code (trusted checkpoints only)."""
        if not allow_pickle:
            raise CheckpointError(
                f"Checkpoint {checkpoint.uri!r} holds a pickled scikit-learn estimator "
                f"({MODEL_FILE}), and unpickling runs code: pass allow_pickle=True "
                "(SklearnPredictor.from_checkpoint(ckpt, allow_pickle=True), or to "
                "BatchPredictor / evaluate()) for checkpoints you trust.")
        return cls(load_estimator(checkpoint), predict_proba=predict_proba)

    def _predict_numpy(self, features: Dict[str, np.ndarray]) -> np.ndarray:
        data = features_frame(features, categorical=False)
        if self._model_features is None and hasattr(data, "to_numpy"):
            data = data.to_numpy()  # fitted without names: no feature-name warning
        return getattr(self.estimator, self._method)(data)
