"""The scheduler interface (Ray Tune's ``ray.tune.schedulers.trial_scheduler``): a
scheduler sees trials through ``trial_id``, ``config``, ``status``, ``last_result`` and
``checkpoint``, and answers each result with CONTINUE, STOP, PAUSE or an
:class:`Exploit`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

from engine.exceptions import ConfigError


@dataclass
class Exploit:
    """PBT's decision: restart this trial from ``donor``'s latest checkpoint with ``config``."""

    donor: Any
    config: Dict[str, Any]
    checkpoint: Any


Decision = Union[str, Exploit]


class TrialScheduler:
    """Base class: every hook is a no-op and every result says CONTINUE."""

    CONTINUE = "CONTINUE"
    STOP = "STOP"
    # The trial ends for now, resumable, and frees its resources; the scheduler decides
    # about it later through pop_paused_decisions().
    PAUSE = "PAUSE"
    NOOP = "NOOP"  # Ray Tune's name for "no change": the same as CONTINUE here
    needs_checkpoints = False

    def __init__(self, metric: Optional[str] = None, mode: Optional[str] = None) -> None:
        if mode not in (None, "min", "max"):
            raise ConfigError(f"{type(self).__name__}(mode={mode!r}) must be 'min' or 'max'.")
        self.metric = metric
        self.mode = mode

    def set_search_properties(self, metric: Optional[str], mode: Optional[str],
                              seed: Optional[int] = None) -> None:
        """Take ``TuneConfig(metric, mode)`` where the scheduler was given none."""
        for name, value in (("metric", metric), ("mode", mode)):
            own = getattr(self, name)
            if own is not None and value is not None and own != value:
                raise ConfigError(
                    f"{type(self).__name__}({name}={own!r}) differs from "
                    f"TuneConfig({name}={value!r}): set it in one place."
                )
            if own is None:
                setattr(self, name, value)

    def _require_metric(self) -> None:
        if self.metric is None or self.mode is None:
            raise ConfigError(
                f"{type(self).__name__} needs a metric and a mode: set TuneConfig(metric=..., "
                f"mode='min'|'max') or {type(self).__name__}(metric=..., mode=...)."
            )

    def _score(self, result: Dict[str, Any]) -> Optional[float]:
        """The metric with larger = better; NaN ranks worst; None when not reported."""
        value = result.get(self.metric) if self.metric else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        value = float(value)
        if math.isnan(value):
            return -math.inf
        return value if self.mode == "max" else -value

    def on_trial_add(self, trial: Any) -> None:
        """A trial was created."""

    def on_trial_result(self, trial: Any, result: Dict[str, Any]) -> Decision:
        return self.CONTINUE

    def on_trial_complete(self, trial: Any, result: Optional[Dict[str, Any]]) -> None:
        """A trial ended (finished, stopped or failed)."""

    def pop_paused_decisions(self) -> Dict[str, Decision]:
        """Decisions about trials this scheduler paused, by trial id: CONTINUE (resume),
        STOP, or an :class:`Exploit` (resume from the donor's checkpoint); the loop asks
        after every event."""
        return {}

    def release_waiting(self) -> None:
        """Nothing runs and no new trial can start: decide about the paused trials with
        what is known (e.g. halve a bracket that will not fill)."""


class FIFOScheduler(TrialScheduler):
    """Runs every trial to the end, in the order they were created."""


__all__ = ["TrialScheduler", "FIFOScheduler", "Exploit", "Decision"]
