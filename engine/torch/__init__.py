"""PyTorch: ``TorchTrainer`` (DDP over gloo or nccl) and the helpers used in train_func.

Importing this package checks that torch is installed but does not import it:
``TorchTrainer`` and ``TorchConfig`` are what a driver needs, and a fresh driver (a Ray
job's) would otherwise spend seconds importing torch that only the workers use. The
helpers used in ``train_func`` (``prepare_model`` …), ``TorchCheckpoint`` and
``TorchPredictor`` import torch when first used.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

if importlib.util.find_spec("torch") is None:  # pragma: no cover - the environment's
    raise ImportError("engine.torch needs PyTorch: pip install 'trainyard[torch]'")

from engine.torch.config import TorchConfig
from engine.torch.trainer import TorchTrainer

# name -> the module that defines it (imported, with torch, on first use)
_LAZY = {
    "TorchCheckpoint": "engine.torch.checkpoint",
    "TorchPredictor": "engine.torch.predictor",
    **{name: "engine.torch.train_loop_utils" for name in (
        "accelerate", "backward", "enable_reproducibility", "get_device", "get_devices",
        "prepare_data_loader", "prepare_model", "prepare_optimizer")},
}

__all__ = [
    "TorchTrainer", "TorchConfig", "TorchCheckpoint", "prepare_model",
    "prepare_data_loader", "prepare_optimizer", "backward", "accelerate",
    "enable_reproducibility", "get_device", "get_devices", "TorchPredictor",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'engine.torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))
