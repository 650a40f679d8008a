"""XGBoost checkpoints: the booster in XGBoost's own UBJSON format (no pickle)."""

from __future__ import annotations

from typing import Any, Optional

from engine._internal.gbdt.checkpoint import BoosterCheckpoint
from engine.checkpoint import Checkpoint
from engine.xgboost.config import import_xgboost

MODEL_FILE = "model.ubj"


class XGBoostCheckpoint(BoosterCheckpoint):
    """A checkpoint holding an ``xgboost.Booster`` in ``model.ubj``.

    Loading it runs no code (``Booster(model_file=...)``), so it is safe for checkpoints
    you did not write yourself. Without ``model.ubj``, the older spellings ``model.json``,
    ``model.xgb`` and ``model`` (Ray AIR saved JSON) are read.
    """

    MODEL_FILENAME = MODEL_FILE
    _OTHER_MODEL_FILES = ("model.json", "model.xgb", "model")
    _TMP_PREFIX = "trainyard_xgb_"
    _MISSING_MODEL = "XGBoost model ({tried})"
    _import_framework = staticmethod(import_xgboost)


def load_booster(checkpoint: Checkpoint, filename: Optional[str] = None) -> Any:
    """The ``xgboost.Booster`` saved in ``checkpoint`` (``model.ubj`` unless
    ``filename`` says otherwise)."""
    return XGBoostCheckpoint.load_booster(checkpoint, filename)
