"""Result: what ``fit()`` returns."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from engine.checkpoint import Checkpoint


@dataclass
class Result:
    """The outcome of a training run.

    Attributes:
        metrics: Rank 0's last reported metrics, with the automatic fields.
        checkpoint: The latest committed checkpoint, or None.
        best_checkpoints: ``(Checkpoint, metrics)`` of the kept best, in report order.
        error: The exception that ended the run, or None.
        path: The run directory (local path or URI); ``log_dir`` is an alias.
        config: The ``train_loop_config`` of the run.
        num_failures: How many times the worker group was restarted after a failure.
        callback_errors: One line for each callback that raised and was disabled
            (``"MyCallback.on_report raised ValueError: ..."``).
    """

    metrics: Dict[str, Any] = field(default_factory=dict)
    checkpoint: Optional[Checkpoint] = None
    best_checkpoints: List[Tuple[Checkpoint, Dict[str, Any]]] = field(default_factory=list)
    error: Optional[BaseException] = None
    path: str = ""
    config: Optional[Dict[str, Any]] = None
    num_failures: int = 0
    history: List[Dict[str, Any]] = field(default_factory=list, repr=False)
    worker_history: List[List[Dict[str, Any]]] = field(default_factory=list, repr=False)
    callback_errors: List[str] = field(default_factory=list)

    @property
    def log_dir(self) -> str:
        return self.path

    @property
    def metrics_dataframe(self):
        """Rank 0's metrics of every report as a pandas DataFrame (one row a report)."""
        import pandas as pd

        rows = [_flatten(row) for row in self.history]
        return pd.DataFrame(rows)

    @property
    def worker_metrics_dataframe(self):
        """Every rank's metrics of every report as a pandas DataFrame: one row per rank
        and report, with a ``rank`` column (rank 0's rows are those of
        :attr:`metrics_dataframe`)."""
        import pandas as pd

        from engine._internal.worker_group.metrics import worker_rows

        return pd.DataFrame([_flatten(r) for r in worker_rows(self.history,
                                                                self.worker_history)])

    def plot(self, metrics: Optional[List[str]] = None, path: Optional[str] = None,
             x: str = "training_iteration") -> str:
        """Write a PNG learning curve of ``metrics`` over ``x``, one panel per metric.

        Args:
            metrics: Column names of :attr:`metrics_dataframe`; None plots every
                numeric metric that is not an automatic field.
            path: Where to write the PNG (local path or URI); defaults to
                ``learning_curve.png`` in the run directory.
            x: The x axis column.

        Returns:
            The path (or URI) written.

        Raises:
            ValueError: A metric that was never reported, or is not numeric.
        """
        from engine._internal.plotting import plot_results

        return plot_results([self], metrics, path, self.path, x)

    @classmethod
    def from_path(cls, path: str, storage_filesystem: Any = None) -> "Result":
        """The Result of a run stored at ``path`` (its run directory, a local path or a
        URI), read without running anything: metrics, checkpoints, history, config and,
        for a failed run, its error as a ``TrainingFailedError``.

        Raises:
            FileNotFoundError: ``path`` holds no run record (``run_state.json``).
        """
        from engine import constants
        from engine._internal.storage import filesystem as _storage
        from engine.exceptions import TrainingFailedError

        path = os.fspath(path)
        if not _storage.is_uri(path):
            path = os.path.abspath(os.path.expanduser(path))
        storage = _storage.Storage.from_path(path.rstrip("/") or "/", storage_filesystem)
        data = storage.read_json(_storage.join(storage.root, constants.RUN_STATE_FILE))
        if data is None:
            raise FileNotFoundError(
                f"Result.from_path({path!r}): no {constants.RUN_STATE_FILE} there. Pass a "
                "run directory (Result.path of a fit(), or a trial directory of a Tuner).")
        # The record lists only committed checkpoints that retention kept.
        tracked = sorted((data.get("checkpoints") or {}).get("checkpoints") or [],
                         key=lambda t: t["index"])
        ckpts = []
        for t in tracked:
            ckpt = Checkpoint(_storage.join(storage.root, t["dir_name"]), storage.fs)
            ckpt.metrics = t.get("metrics") or {}
            ckpts.append(ckpt)
        history = list(data.get("history") or [])
        metrics = dict(history[-1]) if history else {}
        if metrics:
            metrics["config"] = data.get("config") or {}
            metrics["done"] = data.get("state") == "FINISHED"
        error = (TrainingFailedError(data.get("error") or "the run failed")
                 if data.get("state") == "ERRORED" else None)
        return cls(metrics=metrics, checkpoint=ckpts[-1] if ckpts else None,
                   best_checkpoints=[(c, c.metrics) for c in ckpts], error=error,
                   path=storage.display(), config=data.get("config"),
                   num_failures=int(data.get("failures", 0)), history=history,
                   worker_history=list(data.get("worker_history") or []))

    def get_best_checkpoint(self, metric: str, mode: str) -> Optional[Checkpoint]:
        """The kept checkpoint whose reported ``metric`` is best (``mode`` "max" or
        "min"; nested metrics as ``"val/acc"``); NaN ranks worst.

        Raises:
            ValueError: ``mode`` is not "max"/"min".
            RuntimeError: The run kept no checkpoint, or none was reported with
                ``metric`` (the message lists the metrics that were).
        """
        from engine._internal.checkpoint.manager import _lookup
        from engine.config import score_is_better

        if mode not in ("max", "min"):
            raise ValueError(f"get_best_checkpoint(mode={mode!r}): use 'max' or 'min'.")
        if not self.best_checkpoints:
            raise RuntimeError(f"The run at {self.path!r} kept no checkpoint.")
        best: Optional[Tuple[Checkpoint, Any]] = None
        for ckpt, metrics in self.best_checkpoints:
            value = _lookup(metrics or {}, metric)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if best is None or score_is_better(value, best[1], mode):
                best = (ckpt, value)
        if best is None:
            names = sorted({k for _, m in self.best_checkpoints for k in (m or {})})
            raise RuntimeError(
                f"No checkpoint of {self.path!r} was reported with a numeric {metric!r}; "
                f"its checkpoints' metrics are: {names}.")
        return best[0]

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.metrics.items() if k != "config"}
        errors = f", callback_errors={self.callback_errors!r}" if self.callback_errors else ""
        return (f"Result(metrics={shown!r}, checkpoint={self.checkpoint!r}, "
                f"error={self.error!r}, path={self.path!r}{errors})")


def _flatten(row: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict) and key != "config":
            out.update(_flatten(value, f"{prefix}{key}/"))
        elif key != "config":
            out[f"{prefix}{key}"] = value
    return out
