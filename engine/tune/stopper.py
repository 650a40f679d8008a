"""Stoppers for ``RunConfig(stop=...)`` (Ray Tune's ``ray.tune.stopper``).

    from engine.tune.stopper import CombinedStopper, MaximumIterationStopper, TimeoutStopper

    RunConfig(stop=CombinedStopper(MaximumIterationStopper(10), TimeoutStopper(600)))

Subclass :class:`Stopper` (``__call__(trial_id, result)`` and ``stop_all()``) for your own.
"""

from __future__ import annotations

from engine._internal.execution.stopping import (CombinedStopper, ExperimentPlateauStopper,
                                       FunctionStopper, MaximumIterationStopper, NoopStopper,
                                       Stopper, TimeoutStopper, TrialPlateauStopper)

__all__ = ["Stopper", "NoopStopper", "FunctionStopper", "MaximumIterationStopper",
           "TrialPlateauStopper", "ExperimentPlateauStopper", "TimeoutStopper",
           "CombinedStopper"]
