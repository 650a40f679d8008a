"""Result: what ``fit()`` returns."""

from __future__ import annotations

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

        from engine._internal.worker_metrics import worker_rows

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
