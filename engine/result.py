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
    """

    metrics: Dict[str, Any] = field(default_factory=dict)
    checkpoint: Optional[Checkpoint] = None
    best_checkpoints: List[Tuple[Checkpoint, Dict[str, Any]]] = field(default_factory=list)
    error: Optional[BaseException] = None
    path: str = ""
    config: Optional[Dict[str, Any]] = None
    num_failures: int = 0
    history: List[Dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def log_dir(self) -> str:
        return self.path

    @property
    def metrics_dataframe(self):
        """Rank 0's metrics of every report as a pandas DataFrame (one row a report)."""
        import pandas as pd

        rows = [_flatten(row) for row in self.history]
        return pd.DataFrame(rows)

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.metrics.items() if k != "config"}
        return (f"Result(metrics={shown!r}, checkpoint={self.checkpoint!r}, "
                f"error={self.error!r}, path={self.path!r})")


def _flatten(row: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict) and key != "config":
            out.update(_flatten(value, f"{prefix}{key}/"))
        elif key != "config":
            out[f"{prefix}{key}"] = value
    return out
