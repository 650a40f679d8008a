"""Trial schedulers: decide after each report whether a trial goes on, stops, or (PBT)
restarts from a better trial's checkpoint with a perturbed config.

A scheduler sees trials through a few attributes: ``trial_id``, ``config``, ``status``,
``last_result`` and ``checkpoint`` (the latest committed one). ``on_trial_result``
returns :attr:`TrialScheduler.CONTINUE`, :attr:`TrialScheduler.STOP` or an
:class:`Exploit`.

The code lives at Ray's module paths (``async_hyperband``, ``median_stopping_rule``,
``pbt``, ``hyperband`` …); this package re-exports it.
"""

from __future__ import annotations

from engine.tune.schedulers.async_hyperband import ASHAScheduler, AsyncHyperBandScheduler
from engine.tune.schedulers.hb_bohb import HyperBandForBOHB
from engine.tune.schedulers.hyperband import HyperBandScheduler
from engine.tune.schedulers.median_stopping_rule import MedianStoppingRule
from engine.tune.schedulers.pbt import PBT, PopulationBasedTraining
from engine.tune.schedulers.trial_scheduler import Exploit, FIFOScheduler, TrialScheduler

__all__ = ["TrialScheduler", "FIFOScheduler", "ASHAScheduler", "AsyncHyperBandScheduler",
           "MedianStoppingRule", "PopulationBasedTraining", "PBT", "Exploit",
           "HyperBandScheduler", "HyperBandForBOHB"]
