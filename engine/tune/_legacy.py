"""Ray Tune's function API, still common in older scripts: ``tune.run()`` (a Tuner run
under the hood, returning an :class:`ExperimentAnalysis`) and ``tune.with_parameters``."""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional

from engine.config import CheckpointConfig, FailureConfig, RunConfig
from engine.exceptions import ConfigError
from engine.tune.analysis import ExperimentAnalysis, TuneError

logger = logging.getLogger("engine")

# tune.run() arguments that have no trainyard equivalent and change nothing here.
_IGNORED = ("progress_reporter", "log_to_file", "sync_config", "keep_checkpoints_num",
            "checkpoint_score_attr", "export_formats", "max_retries")


def with_parameters(trainable: Callable, **kwargs: Any) -> Callable:
    """A function trainable ``f(config, **kwargs)`` called as ``f(config)`` by the Tuner,
    with ``kwargs`` (e.g. a large dataset) put in Ray's object store once and fetched by
    each trial's worker rather than pickled with every trial.

    Args:
        trainable: ``f(config, **kwargs)``.
        **kwargs: The values to pass.

    Returns:
        A function trainable.

    Raises:
        ConfigError: ``trainable`` is a trainer (pass values in its ``train_loop_config``).
    """
    from engine.trainer import BaseTrainer

    if isinstance(trainable, BaseTrainer) or isinstance(trainable, type) \
            or not callable(trainable):
        raise ConfigError("with_parameters() takes a function f(config, **kwargs); give a "
                          "trainer its values through train_loop_config.")
    return _WithParameters(trainable, kwargs)


class _WithParameters:
    """Pickles to object-store references (put once, when first shipped to a worker)."""

    def __init__(self, fn: Callable, values: Dict[str, Any]) -> None:
        self._fn = fn
        self._values: Optional[Dict[str, Any]] = values
        self._refs: Optional[Dict[str, Any]] = None
        self.__name__ = getattr(fn, "__name__", "trainable")

    def __call__(self, config: Dict[str, Any]) -> Any:
        return self._fn(config, **self._resolve())

    def _resolve(self) -> Dict[str, Any]:
        if self._values is not None:
            return self._values
        import ray

        assert self._refs is not None
        return dict(zip(self._refs, ray.get(list(self._refs.values()))))

    def __getstate__(self) -> Dict[str, Any]:
        import ray

        if self._refs is None and ray.is_initialized():
            self._refs = {k: ray.put(v) for k, v in (self._values or {}).items()}
        if self._refs is None:
            return dict(self.__dict__)
        return dict(self.__dict__, _values=None)


def run(run_or_experiment: Any, *, config: Optional[Dict[str, Any]] = None,
        num_samples: int = 1, stop: Any = None, metric: Optional[str] = None,
        mode: Optional[str] = None, name: Optional[str] = None,
        storage_path: Optional[str] = None, search_alg: Any = None, scheduler: Any = None,
        resources_per_trial: Optional[Dict[str, float]] = None,
        max_concurrent_trials: Optional[int] = None, time_budget_s: Optional[float] = None,
        callbacks: Optional[List[Any]] = None, verbose: int = 1,
        checkpoint_config: Optional[CheckpointConfig] = None, max_failures: int = 0,
        fail_fast: bool = False, raise_on_failed_trial: bool = True,
        reuse_actors: Optional[bool] = None, trial_name_creator: Any = None,
        trial_dirname_creator: Any = None, storage_filesystem: Any = None,
        local_dir: Optional[str] = None, checkpoint_freq: int = 0,
        checkpoint_at_end: bool = False, **other: Any) -> ExperimentAnalysis:
    """Ray Tune's legacy entry point: run ``run_or_experiment`` (a function ``f(config)``
    or a trainer) over ``config`` and return an :class:`ExperimentAnalysis`.

    The arguments mean what they mean to ``Tuner`` (``config`` is its ``param_space``,
    ``stop`` is ``RunConfig(stop=...)``, ``resources_per_trial`` is ``with_resources``,
    ``checkpoint_freq``/``checkpoint_at_end`` are ``CheckpointConfig``'s
    ``checkpoint_frequency``/``checkpoint_at_end`` for a ``Trainable`` class).

    Raises:
        TuneError: A trial failed and ``raise_on_failed_trial`` is True.
        ConfigError: An argument trainyard does not know.
    """
    from engine.tune._trainable import with_resources
    from engine.tune.tune_config import TuneConfig
    from engine.tune.tuner import Tuner

    unknown = sorted(k for k in other if k not in _IGNORED)
    if unknown:
        raise ConfigError(f"tune.run() got arguments trainyard does not support: {unknown}; "
                          "see docs/porting-from-ray.md for their equivalents.")
    for key in other:
        logger.info("tune.run(%s=...) has no effect in trainyard.", key)
    trainable = run_or_experiment
    if checkpoint_freq or checkpoint_at_end:
        import dataclasses

        checkpoint_config = dataclasses.replace(
            checkpoint_config or CheckpointConfig(), checkpoint_frequency=checkpoint_freq,
            checkpoint_at_end=checkpoint_at_end)
    if resources_per_trial:
        trainable = with_resources(trainable, resources_per_trial)
    tuner = Tuner(
        trainable, param_space=config or {},
        tune_config=TuneConfig(
            metric=metric, mode=mode, search_alg=search_alg, scheduler=scheduler,
            num_samples=num_samples, max_concurrent_trials=max_concurrent_trials,
            time_budget_s=time_budget_s, reuse_actors=reuse_actors,
            trial_name_creator=trial_name_creator,
            trial_dirname_creator=trial_dirname_creator),
        run_config=RunConfig(
            name=name, storage_path=storage_path or local_dir, stop=stop,
            callbacks=list(callbacks or []), verbose=min(max(int(verbose), 0), 2),
            checkpoint_config=checkpoint_config,
            failure_config=FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
            storage_filesystem=storage_filesystem))
    grid = tuner.fit()
    if raise_on_failed_trial and grid.errors:
        failed = [r.path for r in grid if r.error is not None]
        raise TuneError(f"Trials did not complete: {failed}. First error: {grid.errors[0]}")
    return ExperimentAnalysis(grid, metric, mode)
