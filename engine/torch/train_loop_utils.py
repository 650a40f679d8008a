"""Helpers used inside ``train_func``: device, DDP, samplers, AMP and reproducibility."""

from __future__ import annotations

import logging
import os
import random
import warnings
from typing import Any, List, Optional

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

from engine import constants
from engine._internal.worker_group.session import get_session

logger = logging.getLogger("engine")


def _state() -> dict:
    session = get_session()
    return session.extra if session is not None else _LOCAL_STATE


_LOCAL_STATE: dict = {}


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def get_device() -> torch.device:
    """The device this worker trains on: its GPU with ``use_gpu=True``, else the CPU."""
    if torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES", "") != "":
        own = constants.get(constants.OWN_GPU_INDEX_ENV_VAR)
        index = own if own is not None else 0
        return torch.device("cuda", index)
    return torch.device("cpu")


def get_devices() -> List[torch.device]:
    """Every device of this worker (Ray's ``get_devices()``): its GPUs with
    ``use_gpu=True`` (the one :func:`get_device` gives first), else ``[cpu]``."""
    first = get_device()
    if first.type != "cuda":
        return [first]
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    try:
        import ray

        own = [str(g) for g in ray.get_gpu_ids()]
    except Exception:  # noqa: BLE001 - outside a Ray worker
        own = []
    indices = [visible.index(g) for g in own if g in visible] or [first.index or 0]
    ordered = [first.index] + [i for i in indices if i != first.index]
    return [torch.device("cuda", i) for i in ordered]


_STRATEGIES = ("ddp", "fsdp", None)


def prepare_model(model: torch.nn.Module, move_to_device: bool = True,
                  parallel_strategy: Optional[str] = "ddp",
                  parallel_strategy_kwargs: Optional[dict] = None,
                  wrap_ddp: bool = True, ddp_kwargs: Optional[dict] = None
                  ) -> torch.nn.Module:
    """Move ``model`` to this worker's device and, when world size > 1, wrap it for
    data-parallel training: DDP (``parallel_strategy="ddp"``, the default) or
    ``torch.distributed.fsdp.FullyShardedDataParallel`` (``"fsdp"``, also on CPU with
    gloo); ``None`` leaves it unwrapped.

    Args:
        model: The module.
        move_to_device: Move it to :func:`get_device` first.
        parallel_strategy: ``"ddp"``, ``"fsdp"`` or ``None``.
        parallel_strategy_kwargs: Keyword arguments of the DDP or FSDP wrapper.
        wrap_ddp, ddp_kwargs: Older spellings (``wrap_ddp=False`` is
            ``parallel_strategy=None``).

    With ``accelerate(amp=True)`` the forward pass runs under autocast and returns
    float32 outputs, so losses are computed in full precision.

    Raises:
        ValueError: an unknown ``parallel_strategy``.
    """
    if parallel_strategy not in _STRATEGIES:
        raise ValueError(f"prepare_model(parallel_strategy={parallel_strategy!r}) is "
                         "unknown: use 'ddp', 'fsdp' or None.")
    if not wrap_ddp:
        parallel_strategy = None
    device = get_device()
    if move_to_device:
        model = model.to(device)
    if _state().get("amp"):
        _autocast_forward(model, device)
    if parallel_strategy is None or _world_size() <= 1:
        return model
    kwargs = {**(ddp_kwargs or {}), **(parallel_strategy_kwargs or {})}
    if parallel_strategy == "fsdp":
        return _wrap_fsdp(model, device, kwargs)
    from torch.nn.parallel import DistributedDataParallel

    if device.type == "cuda":
        kwargs.setdefault("device_ids", [device.index])
        kwargs.setdefault("output_device", device.index)
    return DistributedDataParallel(model, **kwargs)


def _wrap_fsdp(model: torch.nn.Module, device: torch.device, kwargs: dict
               ) -> torch.nn.Module:
    """FSDP on this worker's device (torch supports it on CPU with gloo as well)."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError as exc:  # a torch built without distributed support
        raise RuntimeError(f"prepare_model(parallel_strategy='fsdp') needs "
                           f"torch.distributed.fsdp, which this torch lacks ({exc}); use "
                           "parallel_strategy='ddp'.") from exc
    kwargs.setdefault("device_id", device)
    return FullyShardedDataParallel(model, **kwargs)


def _autocast_forward(model: torch.nn.Module, device: torch.device) -> None:
    dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    original = model.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=device.type, dtype=dtype):
            out = original(*args, **kwargs)
        return _to_float32(out)

    model.forward = forward  # type: ignore[method-assign]


def _to_float32(out: Any) -> Any:
    if isinstance(out, torch.Tensor) and out.is_floating_point():
        return out.float()
    if isinstance(out, (list, tuple)):
        return type(out)(_to_float32(o) for o in out)
    if isinstance(out, dict):
        return {k: _to_float32(v) for k, v in out.items()}
    return out


class _DeviceLoader:
    """Iterates a DataLoader, moving batches to a device and advancing sampler epochs.

    Each pass calls ``sampler.set_epoch`` with the next epoch number so every epoch is
    shuffled differently. After a resume, call ``loader.set_epoch(start_epoch)`` (or
    ``loader.sampler.set_epoch``) to continue the same shuffling sequence.
    """

    def __init__(self, loader: DataLoader, device: torch.device) -> None:
        self._loader = loader
        self._device = device
        self._epoch = 0
        self._set_by_us: Optional[int] = None

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch

    def __iter__(self):
        sampler = getattr(self._loader, "sampler", None)
        if isinstance(sampler, DistributedSampler):
            if self._set_by_us is not None and sampler.epoch != self._set_by_us:
                self._epoch = sampler.epoch  # the user set it: follow them
            sampler.set_epoch(self._epoch)
            self._set_by_us = self._epoch
        self._epoch += 1
        for batch in self._loader:
            yield _move(batch, self._device)


def _move(batch: Any, device: torch.device) -> Any:
    if device.type == "cpu":
        return batch
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_move(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _move(v, device) for k, v in batch.items()}
    return batch


def prepare_data_loader(data_loader: DataLoader, add_dist_sampler: bool = True,
                        move_to_device: bool = True) -> Any:
    """Give the loader a DistributedSampler (each rank a disjoint part, reshuffled each
    epoch when the loader shuffled) and move its batches to this worker's device."""
    world = _world_size()
    if add_dist_sampler and world > 1 and not isinstance(data_loader.sampler,
                                                         DistributedSampler):
        shuffle = isinstance(data_loader.sampler, RandomSampler)
        sampler = DistributedSampler(data_loader.dataset, num_replicas=world,
                                     rank=dist.get_rank(), shuffle=shuffle)
        data_loader = DataLoader(
            data_loader.dataset, batch_size=data_loader.batch_size, sampler=sampler,
            num_workers=data_loader.num_workers, collate_fn=data_loader.collate_fn,
            pin_memory=data_loader.pin_memory, drop_last=data_loader.drop_last,
            timeout=data_loader.timeout, worker_init_fn=data_loader.worker_init_fn,
            generator=data_loader.generator,
        )
    return _DeviceLoader(data_loader, get_device() if move_to_device else torch.device("cpu"))


def accelerate(amp: bool = False) -> None:
    """Turn on automatic mixed precision for ``prepare_model``/``prepare_optimizer``/
    ``backward``. Call it first in ``train_func``. On CPU it uses bfloat16 autocast."""
    if not amp:
        return
    device = get_device()
    available = getattr(torch.amp, "is_autocast_available", lambda _d: True)(device.type)
    if not available:
        warnings.warn(f"AMP is not available on {device.type}; training in full precision.")
        return
    _state()["amp"] = True


class _ScaledOptimizer:
    """An optimizer whose ``step`` goes through a GradScaler (float16 on CUDA)."""

    def __init__(self, optimizer: torch.optim.Optimizer, scaler: Any) -> None:
        self.optimizer = optimizer
        self.scaler = scaler

    def step(self, closure: Any = None) -> Any:
        if closure is not None:
            raise ValueError("AMP optimizers do not take a closure.")
        out = self.scaler.step(self.optimizer)
        self.scaler.update()
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)


def prepare_optimizer(optimizer: torch.optim.Optimizer) -> Any:
    """Wrap the optimizer for AMP (a GradScaler on CUDA; bfloat16 on CPU needs none)."""
    state = _state()
    if state.get("amp") and get_device().type == "cuda":
        scaler = torch.amp.GradScaler("cuda")
        state["scaler"] = scaler
        return _ScaledOptimizer(optimizer, scaler)
    return optimizer


def backward(tensor: torch.Tensor) -> None:
    """``loss.backward()``, scaled when AMP uses a GradScaler."""
    scaler = _state().get("scaler")
    if scaler is not None:
        scaler.scale(tensor).backward()
    else:
        tensor.backward()


def enable_reproducibility(seed: int = 0) -> None:
    """Seed torch, numpy and random, and make torch pick deterministic algorithms.

    The same seed and data give the same weights run after run on the same hardware;
    it cannot make different hardware or library versions agree.
    """
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
