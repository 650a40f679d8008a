"""Predictor base classes: the framework registry and the one-batch :class:`Predictor`.

Framework predictors (``engine.torch.TorchPredictor`` …) subclass :class:`Predictor`;
users import these names from the facade ``engine.predict``. This module sits below
``engine.evaluate`` and ``engine._internal.data.batch_predictor``, which import it.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Dict, List, Optional, Sequence, Type, Union

import numpy as np

from engine._internal.data import batches as _batches
from engine.checkpoint import Checkpoint
from engine.constants import DEFAULT_PREDICT_BATCH_SIZE as DEFAULT_BATCH_SIZE
from engine.exceptions import ConfigError, FrameworkMismatchError

# Framework name (a model card's "framework") -> predictor class, or "module:Class" to
# import on first use, so that this module never imports a framework. A subclass that
# sets ``framework`` registers itself when its module is imported.
_PREDICTORS: Dict[str, Union[str, type]] = {
    "torch": "engine.torch.predictor:TorchPredictor",
    "tensorflow": "engine.tensorflow:TensorflowPredictor",
    "xgboost": "engine.xgboost:XGBoostPredictor",
    "lightgbm": "engine.lightgbm:LightGBMPredictor",
    "sklearn": "engine.sklearn:SklearnPredictor",
    "transformers": "engine.huggingface:TransformersPredictor",
}
# Model cards of trainers that are not tied to one framework: any predictor may load them.
_ANY_FRAMEWORK = (None, "", "generic")


def register_predictor(framework: str, predictor: Union[str, type]) -> None:
    """Make ``predictor`` (a class, or ``"module:Class"`` imported on first use) the one
    :func:`get_predictor_class` and :func:`evaluate` pick for ``framework``."""
    _PREDICTORS[framework] = predictor


def get_predictor_class(framework: Optional[str]) -> Type["Predictor"]:
    """The predictor class registered for a model card's ``framework``.

    Raises:
        ConfigError: no predictor is registered for it (pass ``predictor_cls=``).
    """
    entry = _PREDICTORS.get(framework or "")
    if entry is None:
        raise ConfigError(
            f"No predictor is registered for framework {framework!r} (known: "
            f"{sorted(_PREDICTORS)}): pass predictor_cls=..., e.g. "
            "engine.torch.TorchPredictor.")
    if isinstance(entry, str):
        module, _, name = entry.partition(":")
        entry = getattr(importlib.import_module(module), name)
        _PREDICTORS[framework] = entry
    return entry


class Predictor:
    """Scores batches with a model loaded from a checkpoint.

    Subclasses set ``framework`` (the model card's framework they load), implement
    ``_from_checkpoint`` (load the model) and ``_predict_numpy`` (score feature columns).

    Args:
        preprocessor: Applied to every batch before the features are taken.
        model_card: The checkpoint's ``model_card.json`` (feature/label columns).
        feature_columns: Overrides the model card's feature columns.
    """

    framework: Optional[str] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("framework")
        if own and own not in _PREDICTORS:
            _PREDICTORS[own] = cls

    def __init__(self, preprocessor: Optional[Any] = None,
                 model_card: Optional[Dict[str, Any]] = None,
                 feature_columns: Optional[Sequence[str]] = None) -> None:
        from engine.preprocessors import RayDataPreprocessor, is_ray_data_preprocessor

        if is_ray_data_preprocessor(preprocessor):  # Ray Data's own, as Ray predictors take
            preprocessor = RayDataPreprocessor(preprocessor)
        self.preprocessor = preprocessor
        self.model_card = model_card
        self.feature_columns = list(feature_columns) if feature_columns else None

    # --- construction ----------------------------------------------------------
    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, *, allow_pickle: bool = False,
                        **kwargs: Any) -> "Predictor":
        """Load the model, model card and preprocessor saved in ``checkpoint``.

        Args:
            checkpoint: A checkpoint a trainer (or the user) wrote.
            allow_pickle: Load pickled content (a custom preprocessor, a pickled model):
                a pickle runs code when loaded, so only for checkpoints you trust. By
                default nothing in the checkpoint is unpickled.
            **kwargs: The framework predictor's loading arguments (e.g. ``model=``).

        Raises:
            FrameworkMismatchError: the checkpoint's model card names another framework.
            CheckpointError: the checkpoint needs unpickling and ``allow_pickle`` is False.
        """
        card = checkpoint.get_model_card()
        cls.check_framework(card, checkpoint)
        if "allow_pickle" in inspect.signature(cls._from_checkpoint).parameters:
            kwargs["allow_pickle"] = allow_pickle
        predictor = cls._from_checkpoint(checkpoint, **kwargs)
        predictor.model_card = card
        if predictor.preprocessor is None:
            predictor.preprocessor = checkpoint.get_preprocessor(allow_pickle=allow_pickle)
        return predictor

    @classmethod
    def _from_checkpoint(cls, checkpoint: Checkpoint, **kwargs: Any) -> "Predictor":
        raise NotImplementedError

    @classmethod
    def check_framework(cls, card: Optional[Dict[str, Any]], checkpoint: Any = None) -> None:
        """Raise :class:`FrameworkMismatchError` when the model card's framework is not
        this predictor's (cards of framework-neutral trainers pass)."""
        found = (card or {}).get("framework")
        if cls.framework is None or found in _ANY_FRAMEWORK or found == cls.framework:
            return
        where = f" {checkpoint.uri!r}" if isinstance(checkpoint, Checkpoint) else ""
        try:
            hint = f" ({get_predictor_class(found).__name__})"
        except Exception:
            hint = ""
        raise FrameworkMismatchError(
            f"Checkpoint{where} holds a {found!r} model (model_card.json, trainer "
            f"{(card or {}).get('trainer')!r}) but {cls.__name__} loads {cls.framework!r} "
            f"models: use the {found!r} predictor{hint}.", found, cls.framework)

    # --- scoring -----------------------------------------------------------------
    def predict(self, batch: Any, feature_columns: Optional[Sequence[str]] = None) -> Any:
        """Score one batch.

        Args:
            batch: A pandas DataFrame or a dict of numpy arrays (one row per element).
            feature_columns: The model's input columns, in order; default: the ones given
                to the constructor, else the model card's, else every column but the
                card's label column.

        Returns:
            The same kind of batch with a ``"predictions"`` column (a 2-D output, e.g.
            per-class scores, is one array per row; an ``(n, 1)`` output is flattened).

        Raises:
            MissingColumnsError: the batch lacks a column the model needs.
        """
        return self._predict_batch(batch, feature_columns)

    def _predict_batch(self, batch: Any, feature_columns: Optional[Sequence[str]],
                       exclude: Sequence[str] = ()) -> Any:
        """:meth:`predict`; without feature columns from anywhere, the columns in
        ``exclude`` (kept ids, the label) are not features either."""
        explicit = feature_columns or self.feature_columns
        available = _batches.column_names(batch)
        required = required_columns(self.model_card, self.preprocessor, explicit)
        _batches.check_columns(available, required, "The batch")
        if self.preprocessor is not None:
            batch = self.preprocessor.transform_batch(batch)
            available = _batches.column_names(batch)
        names = _batches.resolve_feature_columns(explicit, self.model_card, available,
                                                 exclude=exclude)
        _batches.check_columns(available, {"feature columns": names}, "The batch")
        outputs = self._predict_numpy(_batches.to_columns(batch, names))
        return _batches.output_batch(_normalize_outputs(outputs), like=batch)

    def _predict_numpy(self, features: Dict[str, np.ndarray]
                       ) -> Union[np.ndarray, Dict[str, np.ndarray]]:
        """Score the feature columns (in feature order): an array of predictions, or a
        dict of output columns."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(preprocessor={self.preprocessor!r})"


def required_columns(card: Optional[Dict[str, Any]], preprocessor: Any,
                     feature_columns: Optional[Sequence[str]] = None,
                     keep_columns: Sequence[str] = ()) -> Dict[str, List[str]]:
    """Why each input column is needed: the feature columns (given, or the model card's),
    the preprocessor's inputs, the columns to keep. Features are not required of the
    input when a custom preprocessor (whose outputs are unknown) runs first."""
    out: Dict[str, List[str]] = {}
    pre_cols = _batches.preprocessor_columns(preprocessor)
    if pre_cols:
        out[f"read by the checkpoint's {type(preprocessor).__name__}"] = pre_cols
    if pre_cols is not None:
        if feature_columns:
            out["feature_columns given"] = [feature_columns] if isinstance(
                feature_columns, str) else list(feature_columns)
        elif (card or {}).get("feature_columns"):
            cols = card["feature_columns"]
            out["feature columns from the model card"] = [cols] if isinstance(
                cols, str) else list(cols)
    if keep_columns:
        out["keep_columns given"] = list(keep_columns)
    return out


def _normalize_outputs(outputs: Any) -> Dict[str, np.ndarray]:
    if not isinstance(outputs, dict):
        outputs = {_batches.PREDICTIONS_COLUMN: outputs}
    out = {}
    for k, v in outputs.items():
        v = np.asarray(v)
        if v.ndim == 2 and v.shape[1] == 1:
            v = v[:, 0]
        out[k] = v
    return out


__all__ = ["Predictor", "register_predictor", "get_predictor_class", "required_columns",
           "DEFAULT_BATCH_SIZE"]
