"""``ReportCheckpointCallback``: Keras logs → ``engine.report``, the model → a checkpoint.

Importing this module imports TensorFlow; its base class is ``tf.keras.callbacks.Callback``
as this process resolves it (Keras 2 in the workers, where ``TF_USE_LEGACY_KERAS=1``).
"""

from __future__ import annotations

import shutil
from typing import Any, Dict, Optional, Sequence, Union

import tensorflow as tf

from engine.tensorflow._logs import EVENTS, Metrics, parse_events, select_metrics
from engine.tensorflow.checkpoint import MODEL_FILE, TensorflowCheckpoint, check_filename

__all__ = ["ReportCheckpointCallback", "EVENTS"]


class ReportCheckpointCallback(tf.keras.callbacks.Callback):
    """Report Keras's logs with ``engine.report`` and checkpoint the model.

    Every worker must use it in the same way (every worker calls ``report`` at the
    same points). Every rank saves the model (saving runs collective ops under
    ``MultiWorkerMirroredStrategy``), and rank 0's file, ``model.keras``, becomes the
    checkpoint (every worker holds the same weights) — read it back with
    ``TensorflowCheckpoint.wrap(ckpt).get_model()`` or ``TensorflowPredictor``.

    Args:
        checkpoint_on: When to save a checkpoint: one of :data:`EVENTS` or a list of
            them (``[]``: never).
        report_metrics_on: When to report the logs without a checkpoint.
        metrics: Which logs to report: None (all), a key, a list of keys, or a dict
            ``{reported name: Keras log key}``. On ``epoch_end`` the epoch number
            (0-based) is added as ``"epoch"`` unless a log has that name.
        filename: The model file name (``*.keras`` or ``*.h5``).

    Raises:
        ValueError: An unknown event name.
        ConfigError: ``filename`` is not a ``.keras``/``.h5`` file name.
        KeyError: (while training) a requested metric is not in Keras's logs; the
            message lists the ones that are.
    """

    def __init__(self, checkpoint_on: Union[str, Sequence[str]] = "epoch_end",
                 report_metrics_on: Union[str, Sequence[str]] = "epoch_end",
                 metrics: Metrics = None, filename: str = MODEL_FILE) -> None:
        super().__init__()
        self._checkpoint_on = parse_events(checkpoint_on, "checkpoint_on")
        self._report_on = parse_events(report_metrics_on, "report_metrics_on")
        if not (metrics is None or isinstance(metrics, (str, list, tuple, dict))):
            raise ValueError(f"metrics must be None, a str, a list or a dict, got "
                             f"{type(metrics).__name__}.")
        check_filename(filename)
        self._metrics = metrics
        self._filename = filename
        wanted = set(self._checkpoint_on) | set(self._report_on)
        for event in ("train_batch_end", "test_batch_end", "predict_batch_end"):
            if event not in wanted:
                # The base class's no-op: Keras then skips the per-batch hooks, and the
                # per-step sync that handing them the logs would cost.
                setattr(self, f"on_{event}", getattr(super(), f"on_{event}"))

    # --- Keras hooks ---------------------------------------------------------
    def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        self._handle(logs, "epoch_end", epoch)

    def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        self._handle(logs, "train_batch_end")

    def on_test_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        self._handle(logs, "test_batch_end")

    def on_predict_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        self._handle(logs, "predict_batch_end")

    def on_train_end(self, logs: Optional[Dict[str, Any]] = None) -> None:
        self._handle(logs, "train_end")

    def on_test_end(self, logs: Optional[Dict[str, Any]] = None) -> None:
        self._handle(logs, "test_end")

    def on_predict_end(self, logs: Optional[Dict[str, Any]] = None) -> None:
        self._handle(logs, "predict_end")

    # --- reporting -----------------------------------------------------------
    def _handle(self, logs: Optional[Dict[str, Any]], when: str,
                epoch: Optional[int] = None) -> None:
        checkpoint_now = when in self._checkpoint_on
        if not checkpoint_now and when not in self._report_on:
            return
        import engine

        metrics = select_metrics(logs or {}, self._metrics)
        if epoch is not None:
            metrics.setdefault("epoch", int(epoch))
        checkpoint = None
        if checkpoint_now:
            # Every rank saves: under MultiWorkerMirroredStrategy saving runs collective
            # ops, so a rank that skipped it would leave the others waiting. Only rank 0's
            # file is kept (all ranks hold the same weights).
            checkpoint = TensorflowCheckpoint.from_model(self.model, self._filename)
            if engine.get_context().get_world_rank() != 0:
                shutil.rmtree(checkpoint.path, ignore_errors=True)
                checkpoint = None
        engine.report(metrics, checkpoint=checkpoint)
