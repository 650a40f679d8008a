"""scikit-learn checkpoints: the fitted estimator, pickled (trusted checkpoints only)."""

from __future__ import annotations

import os
import pickle
from typing import Any, Optional

from engine.checkpoint import Checkpoint, _owned_checkpoint
from engine.exceptions import CheckpointError

MODEL_FILE = "model.pkl"


class SklearnCheckpoint(Checkpoint):
    """A checkpoint holding a fitted scikit-learn estimator in ``model.pkl``.

    A pickle is code: :meth:`get_model` runs whatever the file says (like
    ``Checkpoint.to_dict``, it is the explicit request to unpickle), so load only
    checkpoints you trust (your own runs' storage). ``SklearnPredictor`` refuses them
    unless given ``allow_pickle=True``.
    """

    MODEL_FILENAME = MODEL_FILE

    @classmethod
    def from_estimator(cls, estimator: Any, *, preprocessor: Optional[Any] = None
                       ) -> "SklearnCheckpoint":
        """Pickle ``estimator`` (and a fitted ``engine.preprocessors`` preprocessor) into
        a new temporary directory, removed once the checkpoint is reported."""
        return _owned_checkpoint(
            cls, "trainyard_sklearn_", lambda d: _pickle_to(estimator, os.path.join(d, MODEL_FILE)),
            preprocessor)

    @classmethod
    def wrap(cls, checkpoint: Checkpoint) -> "SklearnCheckpoint":
        return cls(checkpoint.path, checkpoint.filesystem)

    def get_model(self) -> Any:
        """The fitted estimator (unpickled: trusted checkpoints only)."""
        return load_estimator(self)

    get_estimator = get_model


def load_estimator(checkpoint: Checkpoint) -> Any:
    """Unpickle the estimator in ``checkpoint``'s ``model.pkl`` (trusted ones only)."""
    with checkpoint.as_directory() as local:
        path = os.path.join(local, MODEL_FILE)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                return pickle.load(f)
        files = sorted(os.listdir(local))
    raise CheckpointError(
        f"Checkpoint {checkpoint.uri!r} holds no {MODEL_FILE} (it has {files}): save the "
        "estimator with SklearnCheckpoint.from_estimator(estimator).")


def _pickle_to(obj: Any, path: str) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
