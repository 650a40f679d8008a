"""The trial loop: creates trials from the searcher, starts them as far as the cluster's
resources (and ``max_concurrent_trials``) allow, and feeds their results to the
scheduler, the searcher and the callbacks.

Each running trial is one engine ``Controller`` in a driver thread; the controller asks
``_decide`` after every round (and once per poll) whether the trial goes on, stops
(early stopping, time budget), pauses (interrupt) or restarts from another trial's
checkpoint (PBT). The main thread only starts trials and collects finished ones, so a
trial waiting for resources stays PENDING and never blocks the others.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from engine._internal.execution import trial as _trial
from engine._internal.execution.callback_runner import CallbackRunner
from engine._internal.execution.controller import Controller, RunSpec, TrialAction, TrialDecision
from engine._internal.execution.stopping import StopCheck, make_stopper
from engine._internal.execution.trial import Trial
from engine._internal.run_state.record import _jsonable
from engine._internal.storage import filesystem as _storage
from engine._internal.worker_group.group import WorkerGroup
from engine._internal.worker_group.pool import WorkerGroupPool, shared_pool
from engine.callbacks import Callback
from engine.checkpoint import Checkpoint
from engine.config import RunConfig
from engine.exceptions import TrainingFailedError
from engine.result import Result
from engine.tune._capacity import TrialCapacity
from engine.tune._config_space import expand, rebuild
from engine.tune._experiment import ExperimentStore, storable_run_config, tuner_callbacks
from engine.tune._paused import PausedTrials
from engine.tune._pbt import PBT_POLICY_FILE, copy_donor_checkpoint
from engine.tune._progress import ProgressReporter
from engine.tune._restore import PAUSED, restore_trials
from engine.tune._trainable import Trainable
from engine.tune._trial_names import searched, short, trial_tag
from engine.tune.schedulers import Exploit, TrialScheduler
from engine.tune.search import Path, Searcher, get_path, leaves, path_name
from engine.tune.tune_config import TuneConfig

logger = logging.getLogger("engine")

EVENT_WAIT_S = 0.5
INTERRUPT_WAIT_S = 60.0


@dataclass(eq=False)
class TrialRun:
    """The loop's bookkeeping of one trial (callbacks and schedulers see ``trial``)."""

    trial: Trial
    index: int
    dirname: str
    base_tag: str = ""
    spec: Optional[RunSpec] = None
    result: Optional[Result] = None
    exploits: List[Dict[str, Any]] = field(default_factory=list)
    assigned_group: Optional[WorkerGroup] = None
    paused: bool = False

    def to_state(self) -> Dict[str, Any]:
        t = self.trial
        error = None if t.error is None else _storage.scrub(str(t.error))[:2000]
        return {"trial_id": t.trial_id, "trial_name": t.trial_name, "dirname": self.dirname,
                "index": self.index, "status": t.status, "config": t.config,
                "experiment_tag": t.experiment_tag, "base_tag": self.base_tag,
                "evaluated_params": t.evaluated_params, "exploits": self.exploits,
                "error": error}


class _TrialObserver(Callback):
    """Keeps the tuner's Trial pointing at its latest committed checkpoint."""

    def __init__(self, run: TrialRun) -> None:
        self.run = run

    def on_checkpoint(self, checkpoint: Any, metrics: Dict[str, Any]) -> None:
        self.run.trial.checkpoint = checkpoint


class TrialLoop:
    def __init__(self, *, trainable: Trainable, param_space: Dict[str, Any],
                 tune_config: TuneConfig, run_config: RunConfig, store: ExperimentStore,
                 name: str, experiment_id: str, searcher: Searcher,
                 scheduler: TrialScheduler, searcher_done: bool = False) -> None:
        self.trainable = trainable
        self.param_space = param_space
        self.tune_config = tune_config
        self.run_config = run_config
        self.store = store
        self.name = name
        self.experiment_id = experiment_id
        self.searcher = searcher
        self.scheduler = scheduler
        self.searcher_done = searcher_done
        self.runs: List[TrialRun] = []
        self._pending: List[TrialRun] = []
        self._running: List[TrialRun] = []
        self._lock = threading.RLock()
        self._events: "queue.Queue[tuple]" = queue.Queue()
        self._stop_action: Optional[TrialAction] = None
        # RunConfig(stop=...): one stopper for every trial (experiment-wide state such as
        # ExperimentPlateauStopper's); the trials' own run configs carry none.
        stopper = make_stopper(run_config.stop)
        self._stopper = StopCheck(stopper) if stopper is not None else None
        trainable.bind(run_config)
        self._iteration = 0
        space, self._classes = expand(param_space)  # config objects holding a space
        self._params: List[Path] = [p for p, v in leaves(space) if searched(v)]
        progress = ([ProgressReporter(name, tune_config.metric, self._params,
                                      verbose=run_config.verbose)]
                    if run_config.verbose >= 1 else [])
        self._callbacks = CallbackRunner(progress + tuner_callbacks(run_config.callbacks
                                                                     or []))
        self._saved_run_config = storable_run_config(run_config)
        reuse = tune_config.reuse_actors
        if reuse and not trainable.can_reuse:
            logger.info("reuse_actors=True is ignored for %s: its backend sets up each worker "
                        "group afresh.", trainable.name)
        reuse = trainable.reusable if reuse is None else (reuse and trainable.can_reuse)
        # Inside engine.reuse_workers() the block's pool: its idle groups outlive the
        # tune, for the fits and tunes after it.
        shared = shared_pool() if reuse else None
        self._owns_pool = shared is None
        self._pool = (shared or WorkerGroupPool()) if reuse else None
        self._max_trials = searcher.total_trials or tune_config.num_samples
        self._paused = PausedTrials(self)
        self._capacity = TrialCapacity(self._pool)
        self.fail_fast_error: Optional[BaseException] = None

    # --- the loop --------------------------------------------------------------
    def run(self) -> List[TrialRun]:
        import ray

        from engine._internal.ray_runtime.start import ensure_ray

        ensure_ray()
        self._capacity.total = dict(ray.cluster_resources())
        budget = self.tune_config.time_budget_s
        start = time.monotonic()
        try:
            self._save()
            while True:
                self._collect(EVENT_WAIT_S if self._running else 0.0)
                if budget is not None and self._stop_action is None \
                        and time.monotonic() - start > budget:
                    logger.info("Tuner %s: time_budget_s=%s reached; stopping all trials.",
                                self.name, budget)
                    self._stop_action = TrialAction.STOP
                self._paused.apply()
                self._launch()
                if not self._running and not self._pending and self._stop_action is None:
                    self._paused.release()  # no-op unless paused trials wait in vain
                    self._launch()
                if not self._running and (self._stop_action is not None or (
                        not self._pending and self._exhausted())):
                    break
                self._callbacks.call("on_step_end", self._iteration, self.trials)
        except BaseException:  # KeyboardInterrupt: stop trials so that restore resumes
            self._stop_action = TrialAction.PAUSE
            self._wait_running(INTERRUPT_WAIT_S)
            self._save()
            raise
        finally:
            if self._pool is not None and self._owns_pool:
                self._pool.close()
        self._save()
        self._callbacks.call("on_experiment_end", self.trials)
        return self.runs

    @property
    def trials(self) -> List[Trial]:
        return [r.trial for r in self.runs]

    def _exhausted(self) -> bool:
        return self.searcher_done or len(self.runs) >= self._max_trials

    def _collect(self, timeout: float) -> None:
        try:
            event = self._events.get(timeout=timeout) if timeout > 0 \
                else self._events.get_nowait()
        except queue.Empty:
            return
        while True:
            self._on_trial_end(*event)
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return

    def _wait_running(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self._running and time.monotonic() < deadline:
            self._collect(min(EVENT_WAIT_S, max(0.0, deadline - time.monotonic())))

    # --- creating and starting trials ----------------------------------------------
    def _launch(self) -> None:
        limit = self.tune_config.max_concurrent_trials
        while self._stop_action is None:
            if limit is not None and len(self._running) >= limit:
                return
            if not self._pending and self._create() is None:
                return
            run = self._pending[0]
            if not self._capacity.fits(run, self.spec_of(run), self._running):
                return
            self._pending.pop(0)
            self._start(run)

    def _create(self) -> Optional[TrialRun]:
        if self._exhausted():
            return None
        index = len(self.runs)
        trial_id = f"{self.experiment_id[:5]}_{index:05d}"
        with self._lock:
            config = self.searcher.suggest(trial_id)
            if config is None or isinstance(config, str):  # not now, or FINISHED
                # "Not now" waits for a trial that could change the answer.
                if config is not None or not self._unfinished():
                    self.searcher_done = True
                return None
            run = self.new_run(index, trial_id, rebuild(config, self._classes))
            self.runs.append(run)
            self._pending.append(run)
            self.scheduler.on_trial_add(run.trial)
            self._save()
        return run

    def _unfinished(self) -> bool:
        return any(r.trial.status in (_trial.PENDING, _trial.RUNNING, PAUSED)
                   and not (r.trial.status == PAUSED and not r.paused) for r in self.runs)

    def new_run(self, index: int, trial_id: str, config: Dict[str, Any],
                restored: Optional[Dict[str, Any]] = None) -> TrialRun:
        trial = Trial(trial_id=trial_id, trial_name="", config=config)
        if restored is None:
            trial.evaluated_params = self._evaluated(config)
            base_tag = trial_tag(index, trial.evaluated_params)
            trial.experiment_tag = base_tag
            creator = self.tune_config.trial_name_creator
            trial.trial_name = str(creator(trial)) if creator \
                else f"{self.trainable.name}_{trial_id}"
            dir_creator = self.tune_config.trial_dirname_creator
            dirname = str(dir_creator(trial)) if dir_creator else trial.trial_name
            if "/" in dirname or dirname in ("", ".", ".."):
                raise ValueError(f"trial_dirname_creator returned {dirname!r}: use a "
                                 "non-empty name without '/'.")
        else:
            trial.trial_name = restored["trial_name"]
            trial.evaluated_params = restored.get("evaluated_params")
            trial.experiment_tag = restored.get("experiment_tag", str(index))
            trial.status = restored["status"]
            base_tag, dirname = restored.get("base_tag", str(index)), restored["dirname"]
        st = self.store.storage
        trial.storage = _storage.Storage(st.fs, _storage.join(st.root, dirname))
        trial.path = trial.storage.display()
        run = TrialRun(trial=trial, index=index, dirname=dirname, base_tag=base_tag)
        if restored is not None:
            run.exploits = list(restored.get("exploits") or [])
        return run

    def _evaluated(self, config: Dict[str, Any]) -> Dict[str, Any]:
        if self._params:
            return {path_name(p): get_path(config, p) for p in self._params}
        return {path_name(p): v for p, v in leaves(config) if p}

    def spec_of(self, run: TrialRun) -> RunSpec:
        if run.spec is None:
            rc = dataclasses.replace(
                self.run_config, name=run.dirname, storage_path=self.store.storage.root,
                storage_filesystem=self.store.storage.fs, callbacks=[_TrialObserver(run)],
                verbose=0, stop=None)
            info = {"trial_id": run.trial.trial_id, "experiment_id": self.experiment_id,
                    "experiment_tag": run.trial.experiment_tag,
                    "experiment_name": self.name}
            run.spec = self.trainable.make_spec(run.trial.config, rc, info)
        return run.spec

    def _start(self, run: TrialRun) -> None:
        spec = self.spec_of(run)
        if self._pool is not None:
            group_cls = self._pool.factory(run.assigned_group)
            run.assigned_group = None
        else:
            group_cls = WorkerGroup
        with self._lock:
            run.trial.status = _trial.RUNNING
            run.trial.error = None
            self._running.append(run)
            self._callbacks.call("on_trial_start", self._iteration, self.trials, run.trial)
            self._save()
        try:
            controller = Controller(spec, worker_group_cls=group_cls,
                                    decide=functools.partial(self._decide, run))
        except Exception as exc:  # e.g. storage that cannot be used
            self._events.put((run, Result(error=exc, path=run.trial.path)))
            return
        thread = threading.Thread(target=self._run_trial, args=(run, controller),
                                  name=f"trainyard-trial-{run.index}", daemon=True)
        thread.start()

    def _run_trial(self, run: TrialRun, controller: Controller) -> None:
        try:
            result = controller.run()
        except TrainingFailedError as exc:
            result = exc.result if exc.result is not None else Result(path=run.trial.path)
            result.error = exc
        except BaseException as exc:  # noqa: BLE001 - the trial fails, the others go on
            result = Result(error=exc, path=run.trial.path)
        self._events.put((run, result))

    # --- decisions (called in the trial's controller thread) -------------------------
    def _decide(self, run: TrialRun, metrics: Optional[Dict[str, Any]]
                ) -> Optional[TrialDecision]:
        with self._lock:
            if metrics is None and self._stopper is not None and self._stop_action is None \
                    and self._stopper.all():
                logger.info("Tuner %s: the stopper's stop_all() is True; stopping all "
                            "trials.", self.name)
                self._stop_action = TrialAction.STOP
            if metrics is None or self._stop_action is not None:
                return self._stop_decision(run)
            trial = run.trial
            trial.last_result = metrics
            self._iteration += 1
            self._callbacks.call("on_trial_result", self._iteration, self.trials, trial,
                                 metrics)
            if self._stopped(trial.trial_id, metrics):
                self.searcher.on_trial_result(trial.trial_id, metrics)
                return TrialDecision(TrialAction.STOP)
            # The scheduler first, as in Ray Tune: it may annotate the result (e.g.
            # HyperBandForBOHB's budget) for the searcher.
            decision = self.scheduler.on_trial_result(trial, metrics)
            self.searcher.on_trial_result(trial.trial_id, metrics)
            self._paused.take()
        return self._scheduler_decision(run, decision, metrics)

    def _scheduler_decision(self, run: TrialRun, decision: Any, metrics: Dict[str, Any]
                            ) -> Optional[TrialDecision]:
        """The controller's decision for a scheduler's. An exploit and a pause wait for
        the trial's next report (never at its final report)."""
        if isinstance(decision, Exploit):
            return TrialDecision(
                TrialAction.RESTART,
                prepare=functools.partial(self._exploit, run, decision, metrics))
        if decision == TrialScheduler.PAUSE:
            return TrialDecision(
                TrialAction.PAUSE,
                prepare=functools.partial(self._paused.on_pause_due, run, metrics))
        if decision == TrialScheduler.STOP:
            return TrialDecision(TrialAction.STOP)
        return None

    def _stopped(self, trial_id: str, metrics: Dict[str, Any]) -> bool:
        """RunConfig(stop=...) for this trial (checked before the scheduler, as Ray Tune
        does); its ``stop_all()`` stops every trial and starts no new one."""
        if self._stopper is None or not self._stopper.trial(trial_id, metrics):
            return False
        if self._stop_action is None and self._stopper.all():
            self._stop_action = TrialAction.STOP
        return True

    def _stop_decision(self, run: TrialRun) -> Optional[TrialDecision]:
        if self._stop_action is None:
            return None
        run.paused = self._stop_action is TrialAction.PAUSE
        return TrialDecision(self._stop_action)

    def _exploit(self, run: TrialRun, exploit: Exploit, metrics: Dict[str, Any]
                 ) -> Optional[TrialDecision]:
        """Copy the donor's checkpoint (outside the lock: it may be large) and restart
        this trial from it with the perturbed config."""
        taken = self.take_exploit(run, exploit, metrics)
        if taken is None:
            return None
        ckpt, train_config = taken
        return TrialDecision(TrialAction.RESTART, config=train_config, checkpoint=ckpt,
                             trial_info={"experiment_tag": run.trial.experiment_tag})

    def take_exploit(self, run: TrialRun, exploit: Exploit, metrics: Dict[str, Any]
                     ) -> Optional[Tuple[Checkpoint, Dict[str, Any]]]:
        """The copy of the donor's checkpoint the trial restarts from and the config its
        training function gets (the exploit recorded); None: it goes on unchanged."""
        copied = copy_donor_checkpoint(exploit, run.trial.trial_name)
        if copied is None:
            return None
        ckpt, source = copied
        return ckpt, self._adopt_exploit(
            run, dataclasses.replace(exploit, checkpoint=source), metrics)

    def _adopt_exploit(self, run: TrialRun, exploit: Exploit, metrics: Dict[str, Any]
                       ) -> Dict[str, Any]:
        """The trial takes the donor's checkpoint and the perturbed config (recorded in
        its pbt_policy.json); returns the config its training function gets."""
        source = exploit.checkpoint
        with self._lock:
            trial = run.trial
            old = trial.config
            trial.config = exploit.config
            trial.evaluated_params = self._evaluated(exploit.config)
            changed = {path_name(p): v for p, v in leaves(exploit.config)
                       if p and get_path(old, p) != v}
            trial.experiment_tag = (f"{run.base_tag}@perturbed"
                                    f"[{','.join(f'{k}={short(v)}' for k, v in changed.items())}]")
            # The donor's checkpoint until the restarted run has committed its own copy
            # (its on_checkpoint then points the trial there): config and weights agree
            # for a trial that is picked as a donor meanwhile.
            trial.checkpoint = source
            run.exploits.append({
                "training_iteration": metrics.get("training_iteration"),
                "donor_trial_id": exploit.donor.trial_id, "donor_checkpoint": source.uri,
                "donor_training_iteration": (source.metrics or {}).get("training_iteration"),
                "old_config": old, "new_config": exploit.config, "time": time.time()})
            st = trial.storage
            st.write_json_atomic(_storage.join(st.root, PBT_POLICY_FILE),
                                 _jsonable(run.exploits))
            self._save()
            train_config = self.trainable.train_loop_config(exploit.config)
        logger.info("PBT: %s restarts from %s's checkpoint with %s.", trial.trial_name,
                    exploit.donor.trial_name, changed)
        return train_config

    # --- ending trials -------------------------------------------------------------
    def _on_trial_end(self, run: TrialRun, result: Result) -> None:
        with self._lock:
            if run in self._running:
                self._running.remove(run)
            self.finish_run(run, result)
            self._fail_fast(run, result)
            self._save()

    def _fail_fast(self, run: TrialRun, result: Result) -> None:
        """FailureConfig(fail_fast=...): the first failed trial ends the experiment (the
        running trials stop, none starts); Tuner.fit() raises it with "raise"."""
        if result.error is None or self.fail_fast_error is not None \
                or not self.run_config.failure_config.fail_fast:
            return
        self.fail_fast_error = result.error
        if self._stop_action is None:
            self._stop_action = TrialAction.STOP
        logger.warning("Tuner %s: trial %s failed and FailureConfig(fail_fast=%r) is set; "
                       "stopping the experiment.", self.name, run.trial.trial_name,
                       self.run_config.failure_config.fail_fast)

    def finish_run(self, run: TrialRun, result: Result, notify: bool = True) -> None:
        trial = run.trial
        result.config = trial.config
        run.result = result
        if result.metrics:
            trial.last_result = result.metrics
        if run.paused and result.error is None:
            trial.status = PAUSED
            result.metrics["done"] = False
            return
        failed = result.error is not None
        trial.status = _trial.ERROR if failed else _trial.TERMINATED
        trial.error = result.error
        if not notify:
            return
        self.searcher.on_trial_complete(trial.trial_id, result.metrics, error=failed)
        self.scheduler.on_trial_complete(trial, result.metrics)
        self._paused.take()
        hook = "on_trial_error" if failed else "on_trial_complete"
        self._callbacks.call(hook, self._iteration, self.trials, trial)

    # --- restore ----------------------------------------------------------------------
    def restore(self, trials: List[Dict[str, Any]], resume_unfinished: bool = True,
                resume_errored: bool = False, restart_errored: bool = False) -> None:
        """Take back the trials of a saved state (see :func:`restore_trials`)."""
        restore_trials(self, trials, resume_unfinished=resume_unfinished,
                       resume_errored=resume_errored, restart_errored=restart_errored)

    def requeue(self, run: TrialRun) -> None:
        run.trial.status = _trial.PENDING
        self._pending.append(run)

    # --- state -----------------------------------------------------------------------
    def _save(self) -> None:
        with self._lock:
            state = {"name": self.name, "experiment_id": self.experiment_id,
                     "param_space": self.param_space, "tune_config": self.tune_config,
                     "run_config": self._saved_run_config,
                     "searcher_done": self.searcher_done,
                     "trials": [r.to_state() for r in self.runs]}
            self.store.save(state)


