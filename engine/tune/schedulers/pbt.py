"""Ray Tune's ``ray.tune.schedulers.pbt`` path."""

from __future__ import annotations

from engine.tune.schedulers import PopulationBasedTraining, PBT

__all__ = ["PopulationBasedTraining", "PBT"]
