"""Ray Tune's ``ray.tune.schedulers.trial_scheduler`` path."""

from __future__ import annotations

from engine.tune.schedulers import TrialScheduler, FIFOScheduler

__all__ = ["TrialScheduler", "FIFOScheduler"]
