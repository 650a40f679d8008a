"""LightGBM checkpoints: the booster in LightGBM's own text format (no pickle)."""

from __future__ import annotations

from typing import Any, Optional

from engine._internal.gbdt.checkpoint import BoosterCheckpoint
from engine.checkpoint import Checkpoint
from engine.lightgbm.config import import_lightgbm

MODEL_FILE = "model.txt"


class LightGBMCheckpoint(BoosterCheckpoint):
    """A checkpoint holding a ``lightgbm.Booster`` in ``model.txt``.

    Loading it runs no code (``Booster(model_file=...)``), so it is safe for checkpoints
    you did not write yourself.
    """

    MODEL_FILENAME = MODEL_FILE
    _TMP_PREFIX = "trainyard_lgb_"
    _MISSING_MODEL = "LightGBM model {name!r}"
    _import_framework = staticmethod(import_lightgbm)


def load_booster(checkpoint: Checkpoint, filename: Optional[str] = None) -> Any:
    """The ``lightgbm.Booster`` saved in ``checkpoint`` (``model.txt`` by default)."""
    return LightGBMCheckpoint.load_booster(checkpoint, filename)
