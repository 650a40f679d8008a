"""What the tabular predictors share: the feature columns as a named frame, in the
model's own order (XGBoost, LightGBM and scikit-learn), and the booster predictor
(XGBoost and LightGBM), whose framework halves only say how to check, read and feed
their booster."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from engine.checkpoint import Checkpoint
from engine.exceptions import ConfigError
from engine.predict import Predictor


def features_frame(features: Dict[str, Any], categorical: bool = True) -> Any:
    """A predictor's feature columns (in order) as the model input: a DataFrame with
    those names (with ``categorical``, text columns as pandas categories, the way the
    tree frameworks take categorical features), or, for one column of fixed-size
    arrays, that matrix."""
    import pandas as pd

    from engine._internal.data.batches import feature_matrix

    names = list(features)
    if any(getattr(v, "ndim", 1) > 1 for v in features.values()):
        return feature_matrix(features, names)
    frame = pd.DataFrame({n: features[n] for n in names}, copy=False)
    types = pd.api.types
    for name in names if categorical else ():
        dtype = frame[name].dtype
        if not (types.is_numeric_dtype(dtype) or types.is_bool_dtype(dtype)
                or isinstance(dtype, pd.CategoricalDtype)):
            # Text (a category column that became strings on the way): XGBoost and
            # LightGBM map categories to the model's codes by name.
            frame[name] = frame[name].astype("category")
    return frame


class ModelFeatureNames:
    """Predictor mixin: when neither the caller, the predictor nor the model card names
    the feature columns, use the names the model was trained with (``_model_features``)
    if the batch has them all, so their order is the training order."""

    _model_features: Optional[List[str]] = None

    def _predict_batch(self, batch: Any, feature_columns: Optional[Sequence[str]],
                       exclude: Sequence[str] = ()) -> Any:
        from engine._internal.data.batches import column_names

        named = feature_columns or getattr(self, "feature_columns", None) or (
            getattr(self, "model_card", None) or {}).get("feature_columns")
        if not named and self._model_features:
            available = set(column_names(batch))
            if all(n in available for n in self._model_features):
                feature_columns = list(self._model_features)
        return super()._predict_batch(batch, feature_columns, exclude)  # type: ignore[misc]


class BoosterPredictor(ModelFeatureNames, Predictor):
    """Base of ``XGBoostPredictor`` and ``LightGBMPredictor``: scores batches with a
    booster, ``predict(df)`` adding a ``"predictions"`` column.

    A subclass sets ``framework``, ``checkpoint_cls`` (its ``BoosterCheckpoint``, which
    knows the booster class and file) and ``booster_text`` (the booster it takes, as
    its error names it); :meth:`_feature_names` and
    :meth:`_model_input` default to the booster's ``feature_names`` and the frame
    itself.

    Args:
        model: The framework's booster.
        preprocessor: Applied to each batch first.
        model_card: The checkpoint's model card.
        feature_columns: The model's input columns, in order.
        predict_kwargs: Passed to the booster's ``predict``.

    Raises:
        ConfigError: ``model`` is not the framework's booster.
    """

    checkpoint_cls: Any = None
    booster_text = "a booster"

    def __init__(self, model: Any, preprocessor: Optional[Any] = None,
                 model_card: Optional[Dict[str, Any]] = None,
                 feature_columns: Optional[Sequence[str]] = None,
                 predict_kwargs: Optional[Dict[str, Any]] = None) -> None:
        if not isinstance(model, self.checkpoint_cls.booster_class()):
            raise ConfigError(f"{type(self).__name__}(model=...) takes {self.booster_text}, "
                              f"got {type(model).__name__}.")
        super().__init__(preprocessor, model_card, feature_columns)
        self._model_features = self._feature_names(model)
        self.model = model
        self.predict_kwargs = dict(predict_kwargs or {})

    @classmethod
    def _from_checkpoint(cls, checkpoint: Checkpoint, filename: Optional[str] = None,
                         predict_kwargs: Optional[Dict[str, Any]] = None
                         ) -> "BoosterPredictor":
        """Args: ``filename`` (the model file; default the checkpoint class's
        ``MODEL_FILENAME``), ``predict_kwargs``."""
        return cls(cls.checkpoint_cls.load_booster(checkpoint, filename),
                   predict_kwargs=predict_kwargs)

    def _predict_numpy(self, features: Dict[str, np.ndarray]) -> np.ndarray:
        data = self._model_input(features_frame(features))
        return self.model.predict(data, **self.predict_kwargs)

    # --- what the framework says -------------------------------------------------------
    def _feature_names(self, model: Any) -> Optional[List[str]]:
        """The feature names the booster was trained with (None: unknown)."""
        return getattr(model, "feature_names", None)

    def _model_input(self, frame: Any) -> Any:
        """What the booster's ``predict`` takes, from the feature frame."""
        return frame
