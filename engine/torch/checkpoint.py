"""Torch checkpoints saved with ``torch.save`` and loaded with ``weights_only=True``."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Dict, Optional

import torch

from engine.checkpoint import Checkpoint
from engine.exceptions import CheckpointError

MODEL_STATE_FILE = "model.pt"


class TorchCheckpoint(Checkpoint):
    """A checkpoint holding a model's state dict in ``model.pt``.

    Loading uses ``torch.load(weights_only=True)``: tensors and plain containers only,
    no code runs, so it is safe for checkpoints you did not write yourself.
    """

    @classmethod
    def from_state_dict(cls, state_dict: Dict[str, Any],
                        extra: Optional[Dict[str, Any]] = None) -> "TorchCheckpoint":
        """Save a state dict (DDP's ``module.`` prefixes are stripped)."""
        state = {k[len("module."):] if k.startswith("module.") else k: v
                 for k, v in state_dict.items()}
        tmp = tempfile.mkdtemp(prefix="trainyard_ckpt_")
        torch.save({"model": state, "extra": extra or {}}, os.path.join(tmp, MODEL_STATE_FILE))
        return cls(tmp, owns_directory=True)

    @classmethod
    def from_model(cls, model: torch.nn.Module,
                   extra: Optional[Dict[str, Any]] = None) -> "TorchCheckpoint":
        model = getattr(model, "module", model)
        return cls.from_state_dict(model.state_dict(), extra)

    @classmethod
    def wrap(cls, checkpoint: Checkpoint) -> "TorchCheckpoint":
        return cls(checkpoint.path, checkpoint.filesystem)

    def _load(self) -> Dict[str, Any]:
        with self.as_directory() as local:
            path = os.path.join(local, MODEL_STATE_FILE)
            if not os.path.exists(path):
                raise CheckpointError(
                    f"{self.uri!r} holds no {MODEL_STATE_FILE}: it was not saved with "
                    "TorchCheckpoint.from_state_dict/from_model."
                )
            return torch.load(path, map_location="cpu", weights_only=True)

    def get_state_dict(self) -> Dict[str, Any]:
        return self._load()["model"]

    def get_extra(self) -> Dict[str, Any]:
        return self._load()["extra"]

    def get_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Load the saved weights into ``model`` and return it."""
        model.load_state_dict(self.get_state_dict())
        return model
