"""Ray Tune's ``ray.tune.schedulers.hyperband`` path."""

from __future__ import annotations

from engine.tune.schedulers import HyperBandScheduler

__all__ = ["HyperBandScheduler"]
