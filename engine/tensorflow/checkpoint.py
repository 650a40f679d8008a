"""Keras model files as checkpoints: ``model.keras`` (default) or ``.h5``.

Loading uses Keras's ``load_model`` with ``safe_mode`` on for ``.keras`` files (no
lambda or other code is deserialized), so no pickle is involved.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from typing import Any, Callable, List, Optional, Union

from engine.checkpoint import Checkpoint
from engine.exceptions import CheckpointError, ConfigError
from engine.tensorflow.config import INSTALL_HINT

MODEL_FILE = "model.keras"
_MODEL_SUFFIXES = (".keras", ".h5", ".hdf5")


class TensorflowCheckpoint(Checkpoint):
    """A checkpoint holding a Keras model file (``model.keras`` by default).

    Write one in ``train_func`` with :meth:`from_model`; read it with :meth:`get_model`.
    """

    @classmethod
    def from_model(cls, model: Any, filename: str = MODEL_FILE) -> "TensorflowCheckpoint":
        """Save the whole model (architecture, weights, optimizer state) with
        ``model.save`` into a new checkpoint directory.

        Args:
            model: A Keras model.
            filename: ``*.keras`` (Keras's zip format) or ``*.h5``.
        """
        check_filename(filename)
        tmp = tempfile.mkdtemp(prefix="trainyard_ckpt_")
        model.save(os.path.join(tmp, filename))
        return cls(tmp, owns_directory=True)

    @classmethod
    def wrap(cls, checkpoint: Checkpoint) -> "TensorflowCheckpoint":
        """The same directory, with this class's readers."""
        wrapped = cls(checkpoint.path, checkpoint.filesystem)
        wrapped.metrics = checkpoint.metrics
        return wrapped

    def get_model(self, model: Union[Any, Callable[[], Any], None] = None,
                  model_file: Optional[str] = None, compile: bool = True) -> Any:
        """The saved Keras model.

        Args:
            model: None to rebuild the saved model; a Keras model (or a function
                returning one) to load the saved weights into instead (for models whose
                classes cannot be rebuilt from the file).
            model_file: Which file of the checkpoint (default: ``model.keras``, else the
                only ``.keras``/``.h5`` file).
            compile: Restore the compiled loss, metrics and optimizer.
        """
        with self.as_directory() as local:
            return load_keras_model(local, model, model_file, compile=compile, uri=self.uri)


def check_filename(filename: str) -> None:
    """Raise ConfigError unless ``filename`` is a plain Keras model file name."""
    if (not isinstance(filename, str) or not filename.endswith(_MODEL_SUFFIXES)
            or os.path.basename(filename) != filename):
        raise ConfigError(
            f"The model filename {filename!r} must be a plain file name ending in one of "
            f"{list(_MODEL_SUFFIXES)} (e.g. 'model.keras').")


def model_files(local_dir: str) -> List[str]:
    """The Keras model files in a checkpoint directory, ``model.keras`` first."""
    files = sorted(f for f in os.listdir(local_dir) if f.endswith(_MODEL_SUFFIXES))
    return sorted(files, key=lambda f: f != MODEL_FILE)


def find_model_file(local_dir: str, model_file: Optional[str], uri: str) -> Optional[str]:
    """The model file to load, or None when the directory has none."""
    files = model_files(local_dir)
    if model_file is not None:
        if not os.path.isfile(os.path.join(local_dir, model_file)):
            raise CheckpointError(f"Checkpoint {uri or local_dir!r} has no file "
                                  f"{model_file!r} (it holds {sorted(os.listdir(local_dir))}).")
        return model_file
    if not files:
        return None
    if len(files) > 1 and files[0] != MODEL_FILE:
        raise CheckpointError(
            f"Checkpoint {uri or local_dir!r} holds several model files {files}: pass "
            "model_file=... to pick one.")
    return files[0]


def load_keras_model(local_dir: str, model: Any = None, model_file: Optional[str] = None,
                     compile: bool = True, uri: str = "") -> Any:
    """Load a Keras model file of ``local_dir``: the saved model, or its weights into
    ``model`` (a model or a function returning one)."""
    name = find_model_file(local_dir, model_file, uri)
    if name is None:
        raise CheckpointError(
            f"Checkpoint {uri or local_dir!r} holds no Keras model file "
            f"({sorted(os.listdir(local_dir))}): save one with "
            "TensorflowCheckpoint.from_model(model) or ReportCheckpointCallback().")
    require_eager()
    path = os.path.join(local_dir, name)
    if model is not None:
        model = model() if callable(model) and not _is_keras_model(model) else model
        model.load_weights(path)
        return model
    keras = keras_for_file(path)
    try:
        return keras.models.load_model(path, compile=compile)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"Could not rebuild the model saved in {uri or local_dir!r} ({name}): {exc}. "
            "Pass model=YourModel() (or a function building it) to load the weights into."
        ) from exc


def require_eager() -> None:
    """Raise ConfigError when TensorFlow 2 behaviour is off in this process, in which
    Keras models neither load nor predict."""
    import tensorflow as tf

    if not tf.executing_eagerly():
        raise ConfigError(
            "TensorFlow 2 behaviour is off in this process "
            "(tf.compat.v1.disable_v2_behavior() was called; importing RLlib before "
            "TensorFlow does this), so Keras models cannot be loaded or run here. Call "
            "tf.compat.v1.enable_v2_behavior() first, or import TensorFlow before RLlib.")


def _is_keras_model(obj: Any) -> bool:
    return hasattr(obj, "load_weights") and hasattr(obj, "get_weights")


def saved_keras_version(path: str) -> Optional[str]:
    """The Keras version that wrote a ``.keras`` or ``.h5`` file, if it says."""
    try:
        if path.endswith(".keras"):
            with zipfile.ZipFile(path) as zf:
                return str(json.loads(zf.read("metadata.json"))["keras_version"])
        import h5py

        with h5py.File(path, "r") as f:
            version = f.attrs.get("keras_version")
        return version.decode() if isinstance(version, bytes) else version
    except Exception:  # not a Keras file of a known layout: let Keras report it
        return None


def keras_for_file(path: str) -> Any:
    """The Keras that can rebuild a model file: ``tf_keras`` (Keras 2, what the
    workers train with) for files it wrote, Keras 3 for Keras 3 files. Keras 3 cannot
    rebuild a Keras 2 ``.keras`` file, whatever ``tf.keras`` is in this process."""
    version = saved_keras_version(path) or ""
    if version.startswith("3."):
        import keras

        return keras
    try:
        import tf_keras
    except ImportError as exc:
        raise ImportError(
            f"{os.path.basename(path)} was saved by Keras {version or '2'} (tf-keras), "
            f"which is not installed: {INSTALL_HINT}") from exc
    return tf_keras
