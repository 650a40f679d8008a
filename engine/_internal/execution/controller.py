"""The driver loop: an explicit state machine over one training run. It only steers.

INITIALIZING → SCHEDULING → RUNNING → FINISHED, with RUNNING → RESTARTING → SCHEDULING on
a retryable failure and → ERRORED when retries are exhausted. ``_step()`` performs one
transition. Decisions sit behind ``FailurePolicy`` (on the failure's type) and a tuner's
``decide`` hook; each complete round goes to the ``ReportHandler`` (run record,
checkpoint committer, callbacks); ``failure_diagnosis`` writes what a failure says.
"""

from __future__ import annotations

import enum
import logging
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

from engine import constants
from engine._internal.checkpoint.committer import CheckpointCommitter, CommitFailed
from engine._internal.checkpoint.manager import CheckpointManager
from engine._internal.execution import failure_diagnosis as diagnosis
from engine._internal.execution.callback_runner import CallbackRunner
from engine._internal.execution.decisions import RoundDecisions
from engine._internal.execution.failure_policy import FailureDecision, FailurePolicy, FatalError
from engine._internal.execution.report_handler import ReportHandler, UserCallbacks
from engine._internal.execution.rounds import RoundTracker
from engine._internal.execution.stopping import stop_hook
from engine._internal.execution.training_start import dataset_shards, plan_data, session_args
from engine._internal.execution.trial import Trial
from engine._internal.run_state import timeline
from engine._internal.run_state.identity import check_same_run, jsonable
from engine._internal.run_state.lease import RunLease
from engine._internal.run_state.record import RunRecord
from engine._internal.run_state.spec import RunSpec, TrialAction, TrialDecision
from engine._internal.storage import filesystem as _storage
from engine._internal.storage.paths import default_root
from engine._internal.worker_group.backend import Backend
from engine._internal.worker_group.group import PollResult, WorkerGroup, drain
from engine.checkpoint import Checkpoint
from engine.exceptions import StorageError, TrainingFailedError, TrainyardError, WorkerError
from engine.result import Result

__all__ = ["Controller", "RunSpec", "RunState", "TrialAction", "TrialDecision"]

logger = logging.getLogger("engine")


class RunState(enum.Enum):
    INITIALIZING = "INITIALIZING"
    SCHEDULING = "SCHEDULING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    FINISHED = "FINISHED"
    ERRORED = "ERRORED"

    @property
    def terminal(self) -> bool:
        return self in (RunState.FINISHED, RunState.ERRORED)


class Controller:
    """Runs one training run to a Result (or raises TrainingFailedError)."""

    def __init__(self, spec: RunSpec,
                 worker_group_cls: Callable[..., WorkerGroup] = WorkerGroup,
                 decide: Optional[Callable[[Optional[Dict[str, Any]]],
                                           Optional[TrialDecision]]] = None) -> None:
        self.spec = spec
        self.run_config = spec.run_config
        self.worker_group_cls = worker_group_cls
        # A tuner's hook: called with each round's metrics, and with None once per poll;
        # a single fit() gets one from RunConfig(stop=...) (a Tuner applies it itself).
        self.decide = decide or stop_hook(self.run_config.stop, lambda: self.record.trial_id)
        self.failure_policy = FailurePolicy(self.run_config.failure_config.max_failures)
        self.backend: Backend = spec.backend_config.backend_cls()
        # Defaults (result.json, progress.csv) first, then RunConfig(callbacks=...).
        self.callbacks = CallbackRunner.with_defaults(self.run_config.callbacks)
        self.state = RunState.INITIALIZING
        self._lease: Optional[RunLease] = None  # one owner per run: taken in _initialize
        # Called once the run is ours and its storage checked (fit() keeps its trainer).
        self.after_initialize: Optional[Callable[[], None]] = None
        self.name = self.run_config.name or _fresh_name(spec.trainer_name)
        root = _storage.Storage.from_path(default_root(self.run_config.storage_path,
                                                       self.run_config.storage_filesystem),
                                          self.run_config.storage_filesystem)
        self.storage = _storage.Storage(root.fs, _storage.join(root.root, self.name))
        self.record = RunRecord(self.storage, self.name)
        self.checkpoints = CheckpointCommitter(self.storage, self.record, spec, self.name)
        # Each round: the record takes its row, the committer commits its checkpoint
        # (saving the record with it), then the callbacks see both.
        self.reports = ReportHandler([self.record, self.checkpoints,
                                      UserCallbacks(self.callbacks)])
        self.decisions = RoundDecisions(self.decide, self.reports, self.run_config,
                                        self.record.driver_fields)
        self.group: Optional[WorkerGroup] = None
        self.tracker: Optional[RoundTracker] = None
        self.failures = self.attempt = 0
        self.error: Optional[BaseException] = None
        self._finished_result: Optional[Result] = None
        self._last_progress = time.monotonic()
        self._scheduled_at = 0.0
        self._materialized: Optional[Dict[str, List[Any]]] = None  # data.plan MATERIALIZE
        if self.run_config.verbose >= 1:
            from engine._internal.execution.progress import FitProgress

            self.callbacks.callbacks.insert(0, FitProgress(
                self.name, self.run_config.verbose, spec.scaling_config.num_workers,
                self.storage.display(), lambda: len(self.manager.tracked),
                self.run_config.checkpoint_config.checkpoint_score_attribute))

    @property
    def last_metrics(self) -> Dict[str, Any]:
        """The metrics of the last round handled."""
        return self.decisions.last_metrics

    @property
    def manager(self) -> CheckpointManager:
        """The bookkeeping of this run's committed checkpoints."""
        return self.checkpoints.manager

    # --- the loop --------------------------------------------------------------
    def run(self) -> Result:
        timeline.take()  # this run's marks only (a Tuner runs several in one driver)
        timeline.mark("fit_start")
        try:  # the lease taken in _initialize is released however the run ends
            return self._run()
        finally:
            if self._lease is not None:
                self._lease.release()
                self.storage.fence_with(None)

    def _run(self) -> Result:
        try:
            while not self.state.terminal:
                self.state = self._step()
        except BaseException as exc:
            self._teardown()
            self.callbacks.end_trial(exc)  # loggers close their files
            raise
        result = self._finished_result or self._result()
        self.callbacks.end_run(result, self.error if self.state is RunState.ERRORED else None)
        if self.state is RunState.ERRORED:
            raise TrainingFailedError(_storage.scrub(str(self.error)),
                                      result=result) from self.error
        return result

    def _step(self) -> RunState:
        if self._lease is not None and self._lease.lost:
            # The lease's renewal found another driver owning the run: stop now, even
            # between writes (each write checks the lease itself too).
            raise self._lease.lost_error()
        handler = {
            RunState.INITIALIZING: self._initialize,
            RunState.SCHEDULING: self._schedule,
            RunState.RUNNING: self._poll,
            RunState.RESTARTING: self._restart,
        }[self.state]
        return handler()

    # --- states ----------------------------------------------------------------
    def _initialize(self) -> RunState:
        self.storage.check_writable()
        # One owner per run: RunInProgressError, writing nothing, while another driver's
        # lease is live; taken before the record is read or written.
        self._lease = RunLease(self.storage, self.name).acquire()
        # Every write to the run directory from here on is fenced by the lease: once
        # another driver owns the run, the next one raises RunOwnershipLostError.
        self.storage.fence_with(self._lease.check)
        self.checkpoints.written_by = {k: self._lease.owner.get(k)
                                       for k in ("id", "host", "pid")}
        self.record.load()
        # A run is its config: the same name with another config is refused here,
        # before anything is run or written (RunConfigMismatchError).
        check_same_run(self.record.data.get("identity"), self.spec, self.name,
                       self.storage.display(), self.spec.trainer_name)
        if self.record.state == RunState.FINISHED.value:
            logger.info("Run %s already finished; returning its result.", self.name)
            trained = (self.record.data.get("identity") or {}).get("train_loop_config")
            if trained is not None and not self.spec.trial_info \
                    and jsonable(self.spec.train_loop_config or {}) != trained:
                # Trainer.restore with another config given: the Result says what
                # trained its checkpoint, the stored one. (The same config keeps the
                # caller's values, objects included.)
                self.spec.train_loop_config = self.record.data.get("config", trained)
            self.checkpoints.load()
            self._finished_result = self._result(done=True)
            return RunState.FINISHED
        self.checkpoints.recover()
        if self.spec.adopt_checkpoint is not None:
            last = self.record.history[-1] if self.record.history else {}
            self._adopt(self.spec.adopt_checkpoint, last)
            self.spec.adopt_checkpoint = None
        self.failures = int(self.record.data.get("failures", 0))
        self.record.begin(self.spec)
        self.record.data["owner"] = self._lease.owner  # who runs it now
        self.record.save(self.manager)
        if self.after_initialize is not None:
            self.after_initialize()
        trial = Trial(trial_id=self.record.trial_id, trial_name=self.name,
                      config=self.spec.train_loop_config or {}, path=self.storage.display(),
                      storage=self.storage)
        self.callbacks.start_run(self.name, self.spec.train_loop_config or {}, trial)
        return RunState.SCHEDULING

    def _schedule(self) -> RunState:
        self.attempt += 1
        self._scheduled_at = time.time()  # the session's warmup_time counts from here
        self.group = self.worker_group_cls(self.spec.scaling_config, self.spec.worker_env,
                                           needs_data_cpus=bool(self.spec.datasets))
        try:
            self._materialized = plan_data(self.group, self.spec, self._materialized)
            self.group.start()
            self.group.check_storage(self.storage)
            timeline.mark("storage_checked")
            self.backend.on_start(self.group, self.spec.backend_config)
            timeline.mark("collective_set_up")
            self._start_training()
        except TrainyardError:
            self._teardown()
            raise
        except Exception as exc:
            self._teardown()
            return self._on_failure(exc)
        return RunState.RUNNING

    def _start_training(self) -> None:
        group = self.group
        assert group is not None
        start_ckpt = self.checkpoints.latest() or self.spec.resume_from_checkpoint
        latest = self.manager.latest
        start_iteration = self.record.truncate_to(latest.iteration if latest else 0)
        shards = dataset_shards(self.spec, len(group), self._materialized)
        tag = f"{self.attempt:03d}{uuid.uuid4().hex[:6]}"
        args = session_args(self.spec, group, self.storage, self.record, self.name, tag,
                            start_ckpt, start_iteration, shards, self._scheduled_at,
                            self.checkpoints.enabled)
        group.start_training(self.spec.train_func, self.spec.train_loop_config, args,
                             self.spec.backend_config.train_func_wrapper())
        timeline.mark("training_started")
        self._last_progress = time.monotonic()
        self.backend.on_training_start(group, self.spec.backend_config)
        self.tracker = RoundTracker(len(group))

    def _poll(self) -> RunState:
        assert self.tracker is not None and self.group is not None
        timeout = diagnosis.health_check_timeout()
        results = self.group.poll(timeout)
        if not results:
            return self._on_failure(diagnosis.health_check_failed(timeout))
        failure = self._take(results)
        if failure is not None:
            try:
                return self._on_failure(self._diagnose(failure, results))
            except CommitFailed as exc:  # a round complete before the failure, e.g. on
                return self._on_failure(exc)  # the disk the failed round filled
        stalled = self._check_stall()
        if stalled is not None:
            return self._on_failure(stalled)
        try:
            decision = self.decisions.next(self.tracker)
        except FatalError as exc:  # e.g. a stopper that raised: the run fails, no retry
            return self._on_failure(exc)
        if decision is not None and decision.action is not TrialAction.CONTINUE:
            self.decisions.cancel()  # e.g. the tuner stops every trial meanwhile
            try:
                return self._apply_decision(decision)
            except CommitFailed as exc:  # PBT's adopted checkpoint
                return self._on_failure(exc)
        mismatch = self.tracker.mismatch()
        if mismatch:
            return self._on_failure(FatalError(mismatch))
        if self.tracker.all_finished:
            timeline.mark("training_finished")
            self.record.keep_rank0_timeline(self.group)
            self._teardown(graceful=True)
            timeline.mark("workers_stopped")
            self.record.clean_staging()
            self.record.data["timeline"] = {
                **self.record.data.get("timeline", {}), "driver": timeline.marks()}
            self.record.finish(RunState.FINISHED.value, self.manager)
            return RunState.FINISHED
        return RunState.RUNNING

    def _take(self, results: List[PollResult]) -> Optional[WorkerError]:
        """Queue the ranks' reports; return the first (lowest rank's) error."""
        assert self.tracker is not None
        failure: Optional[WorkerError] = None
        for res in results:
            if res.items:
                self._last_progress = time.monotonic()
            for item in res.items:
                self.tracker.add(res.rank, item)
            if res.error is not None:
                failure = failure or res.error
            elif res.finished:
                self.tracker.finish(res.rank)
        return failure

    def _diagnose(self, failure: WorkerError, results: List[PollResult]) -> WorkerError:
        """The error to report (``failure_diagnosis.diagnose``), once the healthy ranks'
        reports are in: rounds they completed before the failure still count, and a
        rank found dead meanwhile is blamed over its peers' echoes."""
        group = self.group
        assert group is not None
        drained = drain(group, constants.POLL_TIMEOUT_S * 2)
        self._take(drained)
        self.checkpoints.free_incomplete_staging(self.tracker)
        self.decisions.process(self.tracker)
        waiting = {r.rank for r in results + drained if r.error is not None and not r.died}
        dead = next((r.error for r in drained if r.died), None)
        return diagnosis.diagnose(failure, dead, waiting, len(group),
                                  lambda ranks: diagnosis.capture_stacks(group, ranks))

    def _check_stall(self) -> Optional[WorkerError]:
        """The backend's watchdog (``stall_timeout_s``): no rank reported for that long
        means the group is stuck, e.g. in a collective one rank never entered."""
        limit = self.spec.backend_config.stall_timeout_s
        if limit is None or self.group is None \
                or time.monotonic() - self._last_progress < limit:
            return None
        finished = self.tracker.finished if self.tracker is not None else {}
        unfinished = [r for r in range(len(self.group)) if not finished.get(r)]
        return diagnosis.stalled(limit, type(self.spec.backend_config).__name__,
                                 diagnosis.capture_stacks(self.group, unfinished))

    def _restart(self) -> RunState:
        self._teardown()
        self.failures += 1
        self.record.data["failures"] = self.failures
        self.record.clean_staging()
        self.callbacks.call("on_retry", self.failures)
        logger.warning("Restarting the worker group (retry %d) from %s.", self.failures,
                       self.manager.latest.dir_name if self.manager.latest else "scratch")
        return RunState.SCHEDULING

    def _on_failure(self, error: BaseException) -> RunState:
        self.decisions.cancel()
        self.error = error
        self.callbacks.call("on_failure", error)
        decision = self.failure_policy.make_decision(error, self.failures)
        if decision is FailureDecision.RETRY:
            logger.warning("Training failed: %s",
                           _storage.scrub(diagnosis.first_line(error)))
            return RunState.RESTARTING
        self._teardown()
        self.record.clean_staging()
        try:
            self.record.finish(RunState.ERRORED.value, self.manager, error=str(error))
        except (OSError, StorageError) as exc:  # e.g. the full disk that failed the run
            logger.warning("Could not save the failed run's record (%s): it still shows "
                           "the run as running, and fit() again resumes it from %s.",
                           exc, self.manager.latest.dir_name if self.manager.latest
                           else "scratch")
        return RunState.ERRORED

    def _apply_decision(self, decision: TrialDecision) -> RunState:
        """A tuner's decision: stop now, pause (resumable), or restart with a new config
        from an adopted checkpoint. None of them counts as a failure."""
        self._teardown()
        self.record.clean_staging()
        if decision.action is TrialAction.STOP:
            self.record.finish(RunState.FINISHED.value, self.manager)
            return RunState.FINISHED
        if decision.action is TrialAction.PAUSE:
            self.record.save(self.manager)  # state stays RUNNING: fit() again resumes
            return RunState.FINISHED
        if decision.checkpoint is not None:
            self._adopt(decision.checkpoint, self.last_metrics)
        if decision.trial_info:
            self.spec.trial_info.update(decision.trial_info)
        if decision.config is not None:
            self.spec.train_loop_config = decision.config
        self.record.begin(self.spec)
        self.record.save(self.manager)
        return RunState.SCHEDULING

    def _adopt(self, ckpt: Checkpoint, last_metrics: Dict[str, Any]) -> None:
        """Make another run's checkpoint (PBT's donor) this run's latest. Training goes
        on from its ``training_iteration`` (the donor's, as in Ray Tune); the rows so
        far stay this run's history. ``on_checkpoint`` tells the callbacks (the tuner's
        trial then points at this run's copy, never at the donor's, which the donor's
        retention may delete)."""
        own = int(last_metrics.get("training_iteration", 0) or 0)
        iteration = int((ckpt.metrics or {}).get("training_iteration") or own)
        self.record.keep_rows()
        adopted = self.checkpoints.adopt(ckpt, iteration)
        self.callbacks.adopted(adopted)

    # --- helpers ---------------------------------------------------------------
    def _teardown(self, graceful: bool = False) -> None:
        if self.group is not None:
            try:
                self.backend.on_shutdown(self.group, self.spec.backend_config)
            except Exception:  # a dead group cannot be shut down politely
                pass
            self.group.shutdown(graceful=graceful)
            self.group = None

    def _result(self, done: Optional[bool] = None) -> Result:
        errored = self.state is RunState.ERRORED
        return self.record.build_result(
            self.manager, done=self.state is RunState.FINISHED if done is None else done,
            config=self.spec.train_loop_config, error=self.error if errored else None,
            failures=self.failures, callback_errors=self.callbacks.errors,
            fallback_metrics=self.last_metrics)


def _fresh_name(trainer_name: str) -> str:
    return f"{trainer_name}_{time.strftime('%Y-%m-%d_%H-%M-%S')}_{uuid.uuid4().hex[:6]}"


