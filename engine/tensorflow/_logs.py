"""Keras logs → report() metrics (no TensorFlow import: unit-testable)."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Union

import numpy as np

#: The Keras hooks ``ReportCheckpointCallback`` can report or checkpoint on.
EVENTS = ("epoch_end", "train_batch_end", "test_batch_end", "predict_batch_end",
          "train_end", "test_end", "predict_end")

Metrics = Union[str, List[str], Dict[str, str], None]


def parse_events(value: Union[str, Sequence[str]], name: str) -> List[str]:
    events = [value] if isinstance(value, str) else list(value)
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        raise ValueError(f"ReportCheckpointCallback({name}={value!r}): unknown event(s) "
                         f"{unknown}; use any of {list(EVENTS)}.")
    return events


def select_metrics(logs: Dict[str, Any], metrics: Metrics) -> Dict[str, Any]:
    """The logs to report, as plain Python values (``report`` takes no tensors)."""
    if metrics is None:
        wanted = {k: k for k in logs}
    elif isinstance(metrics, str):
        wanted = {metrics: metrics}
    elif isinstance(metrics, dict):
        wanted = dict(metrics)
    else:
        wanted = {k: k for k in metrics}
    missing = [key for key in wanted.values() if key not in logs]
    if missing:
        raise KeyError(f"ReportCheckpointCallback: metric(s) {missing} are not in Keras's "
                       f"logs here; the logs have {sorted(logs)}.")
    return {name: to_python(logs[key]) for name, key in wanted.items()}


def to_python(value: Any) -> Any:
    """A tensor / numpy value as a Python scalar or list."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    if isinstance(value, np.ndarray):
        return value.item() if value.size == 1 else value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
