"""Hyperparameter tuning on trainyard's own trial loop (Ray Tune's programming model).

    from engine.tune import Tuner, TuneConfig, grid_search

    tuner = Tuner(trainer, param_space={"train_loop_config": {"lr": grid_search([0.1, 0.01])}},
                  tune_config=TuneConfig(metric="loss", mode="min"))
    best = tuner.fit().get_best_result()

Optuna is imported only when ``OptunaSearch`` is set up (``pip install 'trainyard[tune]'``).
"""

from __future__ import annotations

from engine.tune._trainable import with_resources
from engine.tune.optuna_search import OptunaSearch
from engine.tune.result_grid import ResultGrid
from engine.tune.schedulers import (ASHAScheduler, FIFOScheduler, MedianStoppingRule,
                                    PopulationBasedTraining, TrialScheduler)
from engine.tune.search import (BasicVariantGenerator, Searcher, choice, grid_search,
                                loguniform, quniform, randint, uniform)
from engine.tune.tune_config import TuneConfig
from engine.tune.tuner import Tuner

# Ray Tune's longer names.
AsyncHyperBandScheduler = ASHAScheduler
PBT = PopulationBasedTraining

__all__ = [
    "Tuner", "TuneConfig", "ResultGrid", "grid_search", "choice", "uniform", "quniform",
    "loguniform", "randint", "FIFOScheduler", "ASHAScheduler", "AsyncHyperBandScheduler",
    "MedianStoppingRule", "PopulationBasedTraining", "PBT", "TrialScheduler", "OptunaSearch",
    "Searcher", "BasicVariantGenerator", "with_resources",
]
