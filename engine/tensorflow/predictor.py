"""TensorflowPredictor: a Keras model from a checkpoint, scoring batches.

    predictor = TensorflowPredictor.from_checkpoint(ckpt)            # model.keras / .h5
    predictor = TensorflowPredictor.from_checkpoint(ckpt, model=build_model)  # weights
    predictor.predict(df)                    # DataFrame with a "predictions" column

Where the weights come from, in this order:

- a Keras model file (``model.keras`` from :class:`TensorflowCheckpoint` or
  ``ReportCheckpointCallback``, or any ``.keras``/``.h5`` file, or ``model_file=``):
  rebuilt by the Keras that wrote it (Keras files hold no pickle; ``.keras`` loads in
  safe mode), or loaded into ``model=`` when given;
- a dict checkpoint (``Checkpoint.from_dict``) holding ``model.get_weights()`` under
  ``"model_weights"`` (as the seeds save), ``"weights"`` or ``"model"``, loaded into
  ``model=`` (a pickle: trusted checkpoints only).

TensorFlow is imported when a model is loaded, not when this module is.
"""

from __future__ import annotations

import os
import pickle
from typing import Any, Callable, Dict, Optional, Sequence, Union

import numpy as np

from engine import constants
from engine._internal.data.batches import feature_matrix
from engine.checkpoint import Checkpoint
from engine.exceptions import CheckpointError, ConfigError
from engine.predictor import Predictor
from engine.tensorflow.checkpoint import find_model_file, load_keras_model, require_eager

_WEIGHT_KEYS = ("model_weights", "weights", "model")


class TensorflowPredictor(Predictor):
    """Scores batches with a Keras model (``model(x, training=False)``).

    Features: a single column holding fixed-size arrays is the model input as it is
    (``(n, 64)`` for digits' ``"x"``); several scalar columns are stacked into
    ``(n, k)`` in feature-column order. Inputs are cast to the model's input dtype
    (float32 unless the model says otherwise). An ``(n, 1)`` output becomes a flat
    ``"predictions"`` column; a dict of outputs becomes one column per key.

    Args:
        model: A Keras model (Keras 2 or 3), weights loaded.
        preprocessor: Applied to each batch first.
        use_gpu: Run on a GPU (needs one visible to TensorFlow).
    """

    framework = "tensorflow"

    def __init__(self, model: Any, preprocessor: Optional[Any] = None,
                 use_gpu: bool = False, model_card: Optional[Dict[str, Any]] = None,
                 feature_columns: Optional[Sequence[str]] = None) -> None:
        super().__init__(preprocessor, model_card, feature_columns)
        if not callable(model):
            raise ConfigError(f"model must be a Keras model, got {type(model).__name__}.")
        import tensorflow as tf

        require_eager()
        if use_gpu and not tf.config.list_physical_devices("GPU"):
            raise ConfigError("use_gpu=True but TensorFlow sees no GPU: pass use_gpu=False "
                              "or run where a GPU is visible (tensorflow-cpu has none).")
        self.model = model
        self.device = "/GPU:0" if use_gpu else "/CPU:0"
        self.input_dtype = _input_dtype(model)

    @classmethod
    def _from_checkpoint(cls, checkpoint: Checkpoint,
                         model: Union[Any, Callable[[], Any], None] = None,
                         model_definition: Optional[Callable[[], Any]] = None,
                         model_file: Optional[str] = None,
                         use_gpu: bool = False) -> "TensorflowPredictor":
        """Args: ``model`` (a Keras model or a function building one) to load the
        weights into — needed for dict checkpoints; ``model_definition`` is its older
        name; ``model_file`` (a file of the checkpoint); ``use_gpu``."""
        if model is not None and model_definition is not None:
            raise ConfigError("Pass model=... or its older name model_definition=..., "
                              "not both.")
        model = model if model is not None else model_definition
        with checkpoint.as_directory() as local:
            loaded = load_model(local, model, model_file, uri=checkpoint.uri)
        return cls(loaded, use_gpu=use_gpu)

    def _predict_numpy(self, features: Dict[str, np.ndarray]
                       ) -> Union[np.ndarray, Dict[str, np.ndarray]]:
        import tensorflow as tf

        x = feature_matrix(features, list(features))
        if np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_:
            x = x.astype(self.input_dtype, copy=False)
        with tf.device(self.device):
            out = self.model(tf.convert_to_tensor(x), training=False)
        if isinstance(out, dict):
            return {str(k): _to_numpy(v) for k, v in out.items()}
        if isinstance(out, (list, tuple)):
            out = out[0]  # several outputs: the first is the prediction
        return _to_numpy(out)


def load_model(local_dir: str, model: Union[Any, Callable[[], Any], None] = None,
               model_file: Optional[str] = None, uri: str = "") -> Any:
    """The Keras model a checkpoint directory holds (see the module docstring)."""
    if find_model_file(local_dir, model_file, uri) is not None:
        return load_keras_model(local_dir, model, model_file, compile=False, uri=uri)
    files = sorted(os.listdir(local_dir))
    if constants.DICT_CHECKPOINT_FILE not in files:
        raise CheckpointError(
            f"Checkpoint {uri or local_dir!r} holds no Keras model ({files}): save one with "
            "TensorflowCheckpoint.from_model(model), ReportCheckpointCallback(), or "
            "Checkpoint.from_dict({'model_weights': model.get_weights()}).")
    with open(os.path.join(local_dir, constants.DICT_CHECKPOINT_FILE), "rb") as f:
        data = pickle.load(f)  # a dict checkpoint is a pickle: trusted ones only
    weights = next((data[k] for k in _WEIGHT_KEYS
                    if isinstance(data.get(k), (list, tuple)) and data[k]), None)
    if weights is None:
        raise CheckpointError(
            f"The dict checkpoint {uri or local_dir!r} has no weight list under any of "
            f"{list(_WEIGHT_KEYS)} (keys: {sorted(data)}). Save it as "
            "Checkpoint.from_dict({'model_weights': model.get_weights()}).")
    if model is None:
        raise ConfigError(
            f"Checkpoint {uri or local_dir!r} holds weights only (a dict checkpoint): pass "
            "model=build_model() (or the function building it) to load them into.")
    model = model() if not hasattr(model, "set_weights") else model
    try:
        model.set_weights([np.asarray(w) for w in weights])
    except ValueError as exc:
        raise CheckpointError(
            f"The weights in {uri or local_dir!r} do not fit the model given: {exc}. Pass "
            "the architecture that was trained.") from exc
    return model


def _input_dtype(model: Any) -> str:
    try:
        dtype = model.inputs[0].dtype
        return getattr(dtype, "name", None) or str(dtype)
    except Exception:  # a subclassed / not yet built model: Keras's default
        return "float32"


def _to_numpy(value: Any) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)
