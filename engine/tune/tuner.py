"""Tuner: run a trainer or a function over a search space, many trials at once."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from typing import Any, Dict, List, Optional

from engine.config import RunConfig
from engine.exceptions import ConfigError
from engine.tune._config_space import expand
from engine.tune._experiment import ExperimentStore, fresh_experiment, open_experiment
from engine.tune._loop import TrialLoop, TrialRun
from engine.tune._trainable import make_trainable
from engine.tune.result_grid import ResultGrid
from engine.tune.schedulers import FIFOScheduler, TrialScheduler
from engine.tune.search import BasicVariantGenerator, Searcher
from engine.tune.tune_config import TuneConfig

logger = logging.getLogger("engine")


class Tuner:
    """Tune the hyperparameters of a trainer or of a function.

    Args:
        trainable: A trainer (e.g. ``TorchTrainer``), whose ``param_space`` keys
            ``train_loop_config`` and ``scaling_config`` override its own (merged key by
            key), or a function ``f(config)`` that calls ``engine.report()`` (one worker,
            1 CPU; ``engine.tune.with_resources`` asks for more).
        param_space: The search space: a nested dict of constants, ``grid_search``,
            ``choice``, ``uniform``, ``quniform``, ``loguniform``, ``randint``.
        tune_config: Metric, mode, searcher, scheduler, number of trials, concurrency.
        run_config: Experiment name and storage (trial ``i`` runs in
            ``<storage_path>/<name>/<trial name>/``), checkpoint retention and
            ``FailureConfig`` per trial, callbacks (``on_trial_*`` hooks), verbosity.
            Defaults to the trainer's ``run_config``.

    Running ``fit()`` again with the same ``RunConfig(name=..., storage_path=...)``
    resumes that experiment, as :meth:`restore` does.
    """

    def __init__(self, trainable: Any, *, param_space: Optional[Dict[str, Any]] = None,
                 tune_config: Optional[TuneConfig] = None,
                 run_config: Optional[RunConfig] = None) -> None:
        self._trainable = make_trainable(trainable)
        if param_space is not None and not isinstance(param_space, dict):
            raise ConfigError("param_space must be a dict (e.g. {'train_loop_config': "
                              "{'lr': loguniform(1e-4, 1e-1)}}).")
        self.param_space = dict(param_space or {})
        self.tune_config = tune_config or TuneConfig()
        self.run_config = run_config or self._trainable.base_run_config() or RunConfig()
        self._restored: Optional[Dict[str, Any]] = None
        self._resume_options: Dict[str, bool] = {}
        self._store: Optional[ExperimentStore] = None
        self._grid: Optional[ResultGrid] = None

    @classmethod
    def restore(cls, path: str, trainable: Any, *, resume_unfinished: bool = True,
                resume_errored: bool = False, restart_errored: bool = False,
                param_space: Optional[Dict[str, Any]] = None,
                storage_filesystem: Any = None) -> "Tuner":
        """Resume an interrupted experiment (e.g. after the driver crashed).

        Finished trials keep their results and do not run again; unfinished ones
        continue from their latest checkpoints; the searcher goes on where it stopped.

        Args:
            path: The experiment directory, ``<storage_path>/<name>``.
            trainable: The same trainable as before (code is not stored).
            resume_unfinished: Continue trials that were running or pending.
            resume_errored: Continue failed trials from their latest checkpoints.
            restart_errored: Start failed trials over from scratch.
            param_space: Replaces the stored one (e.g. when it held objects that must be
                rebuilt); trial configs already sampled stay as they were.
            storage_filesystem: The ``pyarrow.fs`` filesystem of ``path``, if needed.

        Raises:
            FileNotFoundError: ``path`` holds no tuner state.
        """
        from engine._internal.storage import filesystem as _storage

        fs, root = _storage.resolve(str(path), storage_filesystem)
        store = ExperimentStore(_storage.Storage(fs, root.rstrip("/")))
        state = store.load()
        tuner = cls(trainable, param_space=param_space or state["param_space"],
                    tune_config=state["tune_config"], run_config=state["run_config"])
        parent, _, name = store.storage.root.rstrip("/").rpartition("/")
        tuner.run_config = dataclasses.replace(tuner.run_config, name=name,
                                               storage_path=parent, storage_filesystem=fs)
        tuner._restored = state
        tuner._store = store
        tuner._resume_options = dict(resume_unfinished=resume_unfinished,
                                     resume_errored=resume_errored,
                                     restart_errored=restart_errored)
        return tuner

    @classmethod
    def can_restore(cls, path: str, storage_filesystem: Any = None) -> bool:
        """Whether ``path`` holds a tuner state to restore."""
        from engine._internal.storage import filesystem as _storage

        fs, root = _storage.resolve(str(path), storage_filesystem)
        return ExperimentStore(_storage.Storage(fs, root)).exists()

    def fit(self) -> ResultGrid:
        """Run every trial (as many at once as resources allow) and return the results.

        A trial that fails does not stop the others: its ``Result.error`` holds a
        ``TrainingFailedError``.
        """
        store = self._store or self._open_store()
        name = store.storage.root.rstrip("/").rpartition("/")[2]
        store.storage.check_writable()
        state = store.load() if store.exists() else None
        if state is not None and self._restored is None:
            logger.info("Experiment %s already has a tuner state; resuming it.", store.path)
        loop = self._make_loop(store, name, state)
        runs = loop.run()
        self._grid = self._grid_of(runs, store)
        if self.run_config.failure_config.fail_fast == "raise" \
                and loop.fail_fast_error is not None:
            raise loop.fail_fast_error
        return self._grid

    def _grid_of(self, runs: List[TrialRun], store: ExperimentStore) -> ResultGrid:
        results = [r.result for r in runs if r.result is not None]
        ids = [r.trial.trial_id for r in runs if r.result is not None]
        return ResultGrid(results, self.tune_config.metric, self.tune_config.mode,
                          store.path, ids)

    def get_results(self) -> ResultGrid:
        """The results of this experiment: those of the last :meth:`fit`, or, for a
        tuner made by :meth:`restore` (or whose ``RunConfig(name, storage_path)`` names
        a stored experiment), the stored ones, without running anything (trials that
        did not finish show their last results with ``done`` False).

        Raises:
            RuntimeError: ``fit()`` was not called and nothing is stored.
        """
        if self._grid is not None:
            return self._grid
        rc = self.run_config
        store = self._store
        if store is None and rc.name is not None:
            store = open_experiment(rc.storage_path, rc.name, rc.storage_filesystem)
        if store is None or not store.exists():
            raise RuntimeError("Tuner.get_results(): the experiment has not run yet. Call "
                               "Tuner.fit() first, or Tuner.restore(path, trainable) to "
                               "read a stored experiment.")
        state = store.load()
        loop = self._make_loop(store, state.get("name", rc.name or ""), None, state)
        loop.restore(state["trials"], resume_unfinished=False)
        return self._grid_of(loop.runs, store)

    def _open_store(self) -> ExperimentStore:
        """The named experiment (resumed when it holds a tuner state), or a fresh
        directory under the default timestamped name (never someone else's)."""
        rc = self.run_config
        if rc.name:
            return open_experiment(rc.storage_path, rc.name, rc.storage_filesystem)
        name = f"{self._trainable.name}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
        return fresh_experiment(rc.storage_path, name, rc.storage_filesystem)

    def _make_loop(self, store: ExperimentStore, name: str,
                   state: Optional[Dict[str, Any]],
                   read_only: Optional[Dict[str, Any]] = None) -> TrialLoop:
        if read_only is not None:  # get_results(): the stored trials, nothing resumed
            return TrialLoop(
                trainable=self._trainable, param_space=self.param_space,
                tune_config=read_only["tune_config"], run_config=self.run_config,
                store=store, name=name, experiment_id=read_only["experiment_id"],
                searcher=BasicVariantGenerator(), scheduler=FIFOScheduler(),
                searcher_done=True)
        tc = self.tune_config if state is None else state["tune_config"]
        searcher: Searcher = tc.search_alg or BasicVariantGenerator()
        scheduler: TrialScheduler = tc.scheduler or FIFOScheduler()
        if state is None:
            searcher.set_search_properties(tc.metric, tc.mode, expand(self.param_space)[0],
                                           tc.num_samples, tc.seed)
            scheduler.set_search_properties(tc.metric, tc.mode, tc.seed)
            tc = dataclasses.replace(tc, search_alg=searcher, scheduler=scheduler)
        _warn_checkpoints(scheduler, self.run_config)
        loop = TrialLoop(
            trainable=self._trainable, param_space=self.param_space, tune_config=tc,
            run_config=self.run_config, store=store, name=name,
            experiment_id=state["experiment_id"] if state else uuid.uuid4().hex,
            searcher=searcher, scheduler=scheduler,
            searcher_done=bool(state and state.get("searcher_done")))
        if state is not None:
            loop.restore(state["trials"], **(self._resume_options or {}))
        return loop


def _warn_checkpoints(scheduler: TrialScheduler, rc: RunConfig) -> None:
    if getattr(scheduler, "needs_checkpoints", False) and \
            rc.checkpoint_config is not None and rc.checkpoint_config.num_to_keep == 0:
        raise ConfigError(f"{type(scheduler).__name__} restarts trials from checkpoints, but "
                          "CheckpointConfig(num_to_keep=0) writes none: keep at least 1.")
