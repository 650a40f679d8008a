"""PyTorch: ``TorchTrainer`` (DDP over gloo or nccl) and the helpers used in train_func.

Importing this package imports torch; ``import engine`` does not.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "engine.torch needs PyTorch: pip install 'trainyard[torch]'"
    ) from exc

from engine.torch.config import TorchConfig
from engine.torch.checkpoint import TorchCheckpoint
from engine.torch.predictor import TorchPredictor
from engine.torch.train_loop_utils import (accelerate, backward, enable_reproducibility,
                                           get_device, get_devices, prepare_data_loader,
                                           prepare_model,
                                           prepare_optimizer)
from engine.torch.trainer import TorchTrainer

__all__ = [
    "TorchTrainer", "TorchConfig", "TorchCheckpoint", "prepare_model",
    "prepare_data_loader", "prepare_optimizer", "backward", "accelerate",
    "enable_reproducibility", "get_device", "get_devices", "TorchPredictor",
]
