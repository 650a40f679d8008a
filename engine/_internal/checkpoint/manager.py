"""Numbering and retention of a run's committed checkpoints.

Pure bookkeeping, no I/O: the controller asks it which directory comes next and what to
delete after a commit. Keeps the ``num_to_keep`` best by score, plus the latest until a
newer one arrives, so the checkpoint a resume starts from is never deleted.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from engine import constants
from engine.config import CheckpointConfig


@dataclass
class TrackedCheckpoint:
    index: int
    iteration: int
    dir_name: str
    metrics: Dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "TrackedCheckpoint":
        return cls(**data)


def checkpoint_dir_name(index: int) -> str:
    return f"{constants.CHECKPOINT_DIR_PREFIX}{index:06d}"


class CheckpointManager:
    """Tracks committed checkpoints and decides which to keep."""

    def __init__(self, config: CheckpointConfig,
                 tracked: Optional[List[TrackedCheckpoint]] = None,
                 next_index: int = 0) -> None:
        self.config = config
        self.tracked: List[TrackedCheckpoint] = list(tracked or [])
        self.next_index = max([next_index] + [t.index + 1 for t in self.tracked])
        self.missing_score_warned = False

    @property
    def enabled(self) -> bool:
        return self.config.num_to_keep != 0

    def next_dir_name(self) -> str:
        return checkpoint_dir_name(self.next_index)

    @property
    def latest(self) -> Optional[TrackedCheckpoint]:
        return max(self.tracked, key=lambda t: t.index) if self.tracked else None

    def _score(self, tracked: TrackedCheckpoint) -> float:
        """A number where larger is better; missing and NaN scores rank worst."""
        attr = self.config.checkpoint_score_attribute
        if attr is None:
            return float(tracked.index)
        value = _lookup(tracked.metrics, attr)
        if not isinstance(value, (int, float)) or isinstance(value, bool) \
                or math.isnan(float(value)):
            return -math.inf
        return float(value) if self.config.checkpoint_score_order == "max" else -float(value)

    def best(self) -> List[TrackedCheckpoint]:
        """The kept best, in the order they were reported."""
        keep = self.config.num_to_keep
        ranked = sorted(self.tracked, key=lambda t: (self._score(t), t.index), reverse=True)
        chosen = ranked if keep is None else ranked[:keep]
        return sorted(chosen, key=lambda t: t.index)

    def register(self, index: int, iteration: int, metrics: Dict[str, Any]
                 ) -> List[TrackedCheckpoint]:
        """Record a committed checkpoint; return the ones that may now be deleted."""
        attr = self.config.checkpoint_score_attribute
        if attr is not None and _lookup(metrics, attr) is None:
            self.missing_score_warned = True
        new = TrackedCheckpoint(index=index, iteration=iteration,
                                dir_name=checkpoint_dir_name(index), metrics=metrics)
        self.tracked.append(new)
        self.next_index = max(self.next_index, index + 1)
        if self.config.num_to_keep is None:
            return []
        keep = {t.index for t in self.best()} | {new.index}
        dropped = [t for t in self.tracked if t.index not in keep]
        self.tracked = [t for t in self.tracked if t.index in keep]
        return dropped

    def to_json(self) -> Dict[str, Any]:
        return {"next_index": self.next_index,
                "checkpoints": [t.to_json() for t in self.tracked]}

    @classmethod
    def from_json(cls, config: CheckpointConfig, data: Optional[Dict[str, Any]]
                  ) -> "CheckpointManager":
        data = data or {}
        tracked = [TrackedCheckpoint.from_json(t) for t in data.get("checkpoints", [])]
        return cls(config, tracked, data.get("next_index", 0))


def _lookup(metrics: Dict[str, Any], attr: str) -> Any:
    """``metrics[attr]``, also reaching into nested dicts with ``a/b`` or ``a.b``."""
    if attr in metrics:
        return metrics[attr]
    for sep in ("/", "."):
        if sep in attr:
            node: Any = metrics
            for part in attr.split(sep):
                if not isinstance(node, dict) or part not in node:
                    node = None
                    break
                node = node[part]
            if node is not None:
                return node
    return None
