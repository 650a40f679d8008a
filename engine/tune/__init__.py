"""Hyperparameter tuning on trainyard's own trial loop (Ray Tune's programming model).

    from engine.tune import Tuner, TuneConfig, grid_search

    tuner = Tuner(trainer, param_space={"train_loop_config": {"lr": grid_search([0.1, 0.01])}},
                  tune_config=TuneConfig(metric="loss", mode="min"))
    best = tuner.fit().get_best_result()

Ray Tune's names are here too (``tune.run``, ``tune.report`` inside a function trainable,
the class API ``tune.Trainable``, Ray ≥ 2.41's ``tune.RunConfig``, ``CheckpointConfig``,
``FailureConfig`` and ``Result``,
the sampling helpers, ``engine.tune.stopper``, ``engine.tune.logger``,
``engine.tune.search.optuna``, ``.hyperopt``, ``.bayesopt``, ``.bohb``): see
docs/porting-from-ray.md.

The searchers' libraries (Optuna, hyperopt, bayesian-optimization, ConfigSpace) are
imported only when a searcher is set up (``pip install 'trainyard[tune]'``).
"""

from __future__ import annotations

from engine.callbacks import Callback
from engine.checkpoint import Checkpoint
from engine.config import CheckpointConfig, FailureConfig, RunConfig
from engine.result import Result
from engine.session import get_checkpoint, report
from engine.tune._context import get_context
from engine.tune import stopper
from engine.tune._legacy import run, with_parameters
from engine.tune._trainable import with_resources
from engine.tune.analysis import ExperimentAnalysis, TuneError
from engine.tune.result_grid import ResultGrid
from engine.tune.schedulers import (ASHAScheduler, AsyncHyperBandScheduler, FIFOScheduler,
                                    HyperBandForBOHB, HyperBandScheduler, MedianStoppingRule,
                                    PopulationBasedTraining, TrialScheduler)
from engine.tune.search import (BasicVariantGenerator, ConcurrencyLimiter, Repeater, Searcher,
                                choice, grid_search, lograndint, loguniform, qlograndint,
                                qloguniform, qrandint, qrandn, quniform, randint, randn,
                                sample_from, uniform)
from engine.tune.search.optuna import OptunaSearch
from engine.tune.stopper import Stopper
from engine.tune.tune_config import TuneConfig
from engine.tune.trainable import Trainable
from engine.tune.tuner import Tuner

PBT = PopulationBasedTraining

__all__ = [
    "Tuner", "TuneConfig", "ResultGrid", "grid_search", "choice", "uniform", "quniform",
    "loguniform", "qloguniform", "randint", "qrandint", "lograndint", "qlograndint",
    "randn", "qrandn", "sample_from", "FIFOScheduler", "ASHAScheduler",
    "AsyncHyperBandScheduler", "HyperBandScheduler", "HyperBandForBOHB", "MedianStoppingRule", "PopulationBasedTraining", "PBT",
    "TrialScheduler", "OptunaSearch", "Searcher", "BasicVariantGenerator",
    "ConcurrencyLimiter", "Repeater", "with_resources",
    "with_parameters", "run", "ExperimentAnalysis", "TuneError", "Stopper", "stopper",
    "report", "get_checkpoint", "get_context", "Checkpoint", "Trainable", "RunConfig",
    "CheckpointConfig", "FailureConfig", "Result", "Callback",
]

