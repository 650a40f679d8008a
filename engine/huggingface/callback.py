"""``TrainReportCallback``: a ``transformers.Trainer``'s logs and checkpoints, reported to
trainyard. Importing this module imports transformers."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any, Dict, Optional

from transformers import TrainerCallback

logger = logging.getLogger("engine")

PREFIX_CHECKPOINT_DIR = "checkpoint"


class TrainReportCallback(TrainerCallback):
    """Reports what a ``transformers.Trainer`` logs and saves through ``engine.report()``.

    One round per burst of logging: the training loss, an evaluation and the checkpoint
    saved right after it (and, at the end, the training summary) go into one report,
    sent when the next step starts or training ends. Each value is the one logged in
    that round, plus ``step`` (global step) and ``epoch``. A checkpoint the Trainer
    saves (``checkpoint-<step>`` in ``output_dir``) becomes the round's checkpoint; with
    several ranks, each node's directory is uploaded once, after every rank of the node
    wrote its part (model and optimizer from rank 0, RNG states per rank, FSDP and
    DeepSpeed shards).

    ``TransformersTrainer`` adds one to every Trainer it is given; add it yourself only
    to a Trainer you run in a ``TorchTrainer`` loop.
    """

    def __init__(self) -> None:
        super().__init__()
        self._metrics: Dict[str, Any] = {}
        self._checkpoint_dir: Optional[str] = None
        self._pending = False
        self._warned_keys: set = set()

    # --- events ------------------------------------------------------------------
    def on_log(self, args: Any, state: Any, control: Any, logs: Optional[Dict[str, Any]] = None,
               **kwargs: Any) -> None:
        for key, value in (logs or {}).items():
            clean = self._clean(key, value)
            if clean is not _DROP:
                self._metrics[key] = clean
        self._mark(state)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        self._checkpoint_dir = folder if _uploads_this_directory(folder) else None
        self._mark(state)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.flush()

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.flush()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.flush()

    # --- reporting ----------------------------------------------------------------
    def flush(self) -> None:
        """Report what was logged and saved since the last report (nothing if nothing)."""
        if not self._pending:
            return
        import engine
        from engine.checkpoint import Checkpoint

        metrics, folder = self._metrics, self._checkpoint_dir
        self._metrics, self._checkpoint_dir, self._pending = {}, None, False
        checkpoint = Checkpoint.from_directory(folder) if folder else None
        engine.report(metrics, checkpoint=checkpoint)

    def _mark(self, state: Any) -> None:
        self._metrics["step"] = int(state.global_step)
        if state.epoch is not None:
            self._metrics["epoch"] = float(state.epoch)
        self._pending = True

    def _clean(self, key: str, value: Any) -> Any:
        """A JSON-able metric value (numpy and tensor scalars become numbers)."""
        out = _plain(value)
        if out is _DROP and key not in self._warned_keys:
            self._warned_keys.add(key)
            logger.warning("Trainer log %r has a %s value; it is not reported (report "
                           "numbers, strings, or lists/dicts of them).", key,
                           type(value).__name__)
        return out


_DROP = object()


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value
    if hasattr(value, "tolist") and hasattr(value, "shape"):  # numpy / torch
        value = value.tolist()
        return value if not isinstance(value, (list, dict)) else _plain(value)
    if hasattr(value, "item"):  # numpy scalar types
        try:
            return _plain(value.item())
        except (TypeError, ValueError):
            return _DROP
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return _DROP if any(v is _DROP for v in items) else items
    if isinstance(value, dict):
        out = {str(k): _plain(v) for k, v in value.items()}
        return _DROP if any(v is _DROP for v in out.values()) else out
    return _DROP


def _uploads_this_directory(folder: str) -> bool:
    """Whether this rank uploads ``folder``: the lowest rank of each node that holds it.

    A collective over the engine's process group (every rank calls ``on_save``), so it
    also waits until every rank finished writing its files into the directory.
    """
    exists = os.path.isdir(folder)
    try:
        import torch.distributed as dist

        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    except ImportError:  # pragma: no cover - torch is a dependency
        distributed = False
    if not distributed:
        return exists
    key = (socket.gethostname(), _node_rank(), os.path.realpath(folder) if exists else None)
    keys: list = [None] * dist.get_world_size()
    dist.all_gather_object(keys, key)
    rank = dist.get_rank()
    return exists and all(keys[r] != key for r in range(rank))


def _node_rank() -> int:
    from engine._internal.worker_group.session import get_session

    session = get_session()
    return session.context.node_rank if session is not None else 0


__all__ = ["TrainReportCallback"]
