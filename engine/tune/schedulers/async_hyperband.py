"""Ray Tune's ``ray.tune.schedulers.async_hyperband`` path."""

from __future__ import annotations

from engine.tune.schedulers import ASHAScheduler, AsyncHyperBandScheduler

__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler"]
