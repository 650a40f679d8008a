"""Ray Tune's ``ray.tune.schedulers.median_stopping_rule`` path."""

from __future__ import annotations

from engine.tune.schedulers import MedianStoppingRule

__all__ = ["MedianStoppingRule"]
