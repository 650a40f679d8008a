"""XGBoost checkpoints: the booster in XGBoost's own UBJSON format (no pickle)."""

from __future__ import annotations

import os
from typing import Any, Optional

from engine.checkpoint import Checkpoint, _owned_checkpoint
from engine.exceptions import CheckpointError
from engine.xgboost.config import import_xgboost

MODEL_FILE = "model.ubj"
# Older spellings (Ray AIR saved JSON), read when MODEL_FILE is absent.
_OTHER_MODEL_FILES = ("model.json", "model.xgb", "model")


class XGBoostCheckpoint(Checkpoint):
    """A checkpoint holding an ``xgboost.Booster`` in ``model.ubj``.

    Loading it runs no code (``Booster.load_model``), so it is safe for checkpoints you
    did not write yourself.
    """

    MODEL_FILENAME = MODEL_FILE

    @classmethod
    def from_model(cls, booster: Any, *, preprocessor: Optional[Any] = None,
                   filename: str = MODEL_FILE) -> "XGBoostCheckpoint":
        """Save ``booster`` (and a fitted ``engine.preprocessors`` preprocessor) into a
        new temporary directory, removed once the checkpoint is reported."""
        return _owned_checkpoint(
            cls, "trainyard_xgb_", lambda d: booster.save_model(os.path.join(d, filename)),
            preprocessor)

    @classmethod
    def wrap(cls, checkpoint: Checkpoint) -> "XGBoostCheckpoint":
        return cls(checkpoint.path, checkpoint.filesystem)

    def get_model(self, filename: Optional[str] = None) -> Any:
        """The saved ``xgboost.Booster``."""
        return load_booster(self, filename)


def load_booster(checkpoint: Checkpoint, filename: Optional[str] = None) -> Any:
    """The ``xgboost.Booster`` saved in ``checkpoint`` (``model.ubj`` unless
    ``filename`` says otherwise)."""
    xgboost = import_xgboost()
    with checkpoint.as_directory() as local:
        files = sorted(os.listdir(local))
        names = [filename] if filename else [MODEL_FILE, *_OTHER_MODEL_FILES]
        for name in names:
            if name in files:
                booster = xgboost.Booster()
                booster.load_model(os.path.join(local, name))
                return booster
    raise CheckpointError(
        f"Checkpoint {checkpoint.uri!r} holds no XGBoost model ({', '.join(names)}); it "
        f"has {files}. Save one with XGBoostCheckpoint.from_model(booster) or "
        "engine.xgboost.ReportCallback, or pass filename=...")
