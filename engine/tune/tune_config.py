"""TuneConfig: what to optimise, how to search, how many trials, how many at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from engine.exceptions import ConfigError


@dataclass
class TuneConfig:
    """Settings of a :class:`engine.tune.Tuner` run.

    Args:
        metric: The reported metric to optimise (default for ``get_best_result``, the
            searcher and the scheduler).
        mode: ``"min"`` or ``"max"``.
        search_alg: A searcher, e.g. ``OptunaSearch()``; default: every grid combination
            ``num_samples`` times with random leaves sampled.
        scheduler: ``FIFOScheduler`` (default), ``ASHAScheduler``, ``MedianStoppingRule``
            or ``PopulationBasedTraining``.
        num_samples: Repeats of the grid (default searcher), or number of trials
            (other searchers).
        max_concurrent_trials: At most this many trials at once; by default as many as
            the cluster's resources allow.
        time_budget_s: Stop every trial and start no new one after this many seconds.
        seed: Seed of the random sampling (searcher and PBT), for reproducible configs.
        reuse_actors: Run a new trial on a finished trial's worker processes when the
            resources match (each worker is reset in between: the framework's
            collective torn down, its environment and the user's modules restored; see
            ``engine.reuse_workers``). Default: True for functions and every trainer
            but RLlib's (and a user's own ``BackendConfig`` subclass), which always
            start new workers.
        trial_name_creator: ``f(trial) -> str`` naming trials (default
            ``<trainable>_<trial_id>``).
        trial_dirname_creator: ``f(trial) -> str`` naming trial directories (default:
            the trial name).
    """

    metric: Optional[str] = None
    mode: Optional[str] = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: Optional[int] = None
    time_budget_s: Optional[float] = None
    seed: Optional[int] = None
    reuse_actors: Optional[bool] = None
    trial_name_creator: Optional[Callable[[Any], str]] = None
    trial_dirname_creator: Optional[Callable[[Any], str]] = None

    def __post_init__(self) -> None:
        if self.mode not in (None, "min", "max"):
            raise ConfigError(f"TuneConfig(mode={self.mode!r}) must be 'min' or 'max'.")
        if (self.mode is None) != (self.metric is None) and self.search_alg is None \
                and self.scheduler is None:
            raise ConfigError("TuneConfig needs metric and mode together (e.g. "
                              "TuneConfig(metric='loss', mode='min')), or neither.")
        if not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise ConfigError(f"TuneConfig(num_samples={self.num_samples!r}) must be an "
                              "integer >= 1.")
        if self.max_concurrent_trials is not None and (
                not isinstance(self.max_concurrent_trials, int)
                or self.max_concurrent_trials < 1):
            raise ConfigError(f"TuneConfig(max_concurrent_trials="
                              f"{self.max_concurrent_trials!r}) must be None or >= 1.")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ConfigError(f"TuneConfig(time_budget_s={self.time_budget_s!r}) must be > 0.")
