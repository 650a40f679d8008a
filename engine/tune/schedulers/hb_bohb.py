"""Ray Tune's ``ray.tune.schedulers.hb_bohb`` path."""

from __future__ import annotations

from engine.tune.schedulers.hyperband import HyperBandForBOHB

__all__ = ["HyperBandForBOHB"]
