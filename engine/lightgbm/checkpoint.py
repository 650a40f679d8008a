"""LightGBM checkpoints: the booster in LightGBM's text model format (no pickle)."""

from __future__ import annotations

import os
from typing import Any, Optional

from engine.checkpoint import Checkpoint, _owned_checkpoint
from engine.exceptions import CheckpointError
from engine.lightgbm.config import import_lightgbm

MODEL_FILE = "model.txt"


class LightGBMCheckpoint(Checkpoint):
    """A checkpoint holding a ``lightgbm.Booster`` in ``model.txt``.

    Loading it runs no code (``Booster(model_file=...)``), so it is safe for checkpoints
    you did not write yourself.
    """

    MODEL_FILENAME = MODEL_FILE

    @classmethod
    def from_model(cls, booster: Any, *, preprocessor: Optional[Any] = None,
                   filename: str = MODEL_FILE) -> "LightGBMCheckpoint":
        """Save ``booster`` (and a fitted ``engine.preprocessors`` preprocessor) into a
        new temporary directory, removed once the checkpoint is reported."""
        return _owned_checkpoint(
            cls, "trainyard_lgb_", lambda d: booster.save_model(os.path.join(d, filename)),
            preprocessor)

    @classmethod
    def wrap(cls, checkpoint: Checkpoint) -> "LightGBMCheckpoint":
        return cls(checkpoint.path, checkpoint.filesystem)

    def get_model(self, filename: str = MODEL_FILE) -> Any:
        """The saved ``lightgbm.Booster``."""
        return load_booster(self, filename)


def load_booster(checkpoint: Checkpoint, filename: Optional[str] = None) -> Any:
    """The ``lightgbm.Booster`` saved in ``checkpoint`` (``model.txt`` by default)."""
    lightgbm = import_lightgbm()
    name = filename or MODEL_FILE
    with checkpoint.as_directory() as local:
        path = os.path.join(local, name)
        if os.path.isfile(path):
            return lightgbm.Booster(model_file=path)
        files = sorted(os.listdir(local))
    raise CheckpointError(
        f"Checkpoint {checkpoint.uri!r} holds no LightGBM model {name!r}; it has {files}. "
        "Save one with LightGBMCheckpoint.from_model(booster) or "
        "engine.lightgbm.ReportCallback, or pass filename=...")
