"""The driver loop: an explicit state machine over one training run.

INITIALIZING → SCHEDULING → RUNNING → FINISHED, with RUNNING → RESTARTING → SCHEDULING on
a retryable failure and → ERRORED when retries are exhausted. ``_step()`` performs one
transition; decisions (retry or raise) sit behind ``FailurePolicy``.
"""

from __future__ import annotations

import enum
import logging
import re
import shutil
import time
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from engine import constants
from engine._internal import storage as _storage
from engine._internal.backend import Backend, BackendConfig
from engine._internal.callback_runner import CallbackRunner
from engine._internal.checkpoint_manager import CheckpointManager
from engine._internal.rounds import RoundTracker
from engine._internal.run_record import RunRecord
from engine._internal.session import ReportItem, TrainContext
from engine._internal.trial import Trial
from engine._internal.worker_metrics import reduce_metrics
from engine._internal.worker_group import PollResult, WorkerGroup
from engine.checkpoint import Checkpoint
from engine.config import DataConfig, RunConfig, ScalingConfig
from engine.exceptions import (CheckpointError, StorageError, TrainingFailedError,
                               TrainyardError, WorkerError)
from engine.result import Result

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


class FailureDecision(enum.Enum):
    RETRY = "RETRY"
    RAISE = "RAISE"


class FailurePolicy:
    """Retry while ``FailureConfig.max_failures`` allows."""

    def __init__(self, max_failures: int) -> None:
        self.max_failures = max_failures

    def make_decision(self, error: BaseException, failures_so_far: int) -> FailureDecision:
        if isinstance(error, _FatalError):
            return FailureDecision.RAISE
        if self.max_failures == -1 or failures_so_far < self.max_failures:
            return FailureDecision.RETRY
        return FailureDecision.RAISE


class _FatalError(TrainyardError):
    """A failure a retry cannot fix (e.g. uneven report() calls)."""


class TrialAction(enum.Enum):
    """What a tuner tells a running trial (``Controller(decide=...)``)."""

    CONTINUE = "CONTINUE"
    STOP = "STOP"        # early stopping: the run ends now as FINISHED (done=True)
    PAUSE = "PAUSE"      # the tuning loop was interrupted: end now, stay resumable
    RESTART = "RESTART"  # PBT's exploit: adopt `checkpoint`, restart with `config`


@dataclass
class TrialDecision:
    """``checkpoint``: a local copy (without commit marker) adopted as this run's latest
    checkpoint before restarting; ``trial_info`` updates ``RunSpec.trial_info``."""

    action: TrialAction
    config: Optional[Dict[str, Any]] = None
    checkpoint: Optional[Checkpoint] = None
    trial_info: Optional[Dict[str, Any]] = None


@dataclass
class RunSpec:
    """Everything a trainer hands the controller."""

    train_func: Callable
    train_loop_config: Optional[Dict[str, Any]]
    scaling_config: ScalingConfig
    run_config: RunConfig
    backend_config: BackendConfig
    trainer_name: str = "Trainer"
    datasets: Dict[str, Any] = field(default_factory=dict)
    data_config: DataConfig = field(default_factory=DataConfig)
    resume_from_checkpoint: Optional[Checkpoint] = None
    worker_env: Dict[str, str] = field(default_factory=dict)
    trial_info: Dict[str, Any] = field(default_factory=dict)
    # Saved into every committed checkpoint, so prediction needs nothing else.
    preprocessor: Any = None
    model_card: Dict[str, Any] = field(default_factory=dict)


class Controller:
    """Runs one training run to a Result (or raises TrainingFailedError)."""

    def __init__(self, spec: RunSpec,
                 worker_group_cls: Callable[..., WorkerGroup] = WorkerGroup,
                 decide: Optional[Callable[[Optional[Dict[str, Any]]],
                                           Optional[TrialDecision]]] = None) -> None:
        self.spec = spec
        self.run_config = spec.run_config
        self.worker_group_cls = worker_group_cls
        # A tuner's hook: called with each round's metrics, and with None once per poll.
        self.decide = decide
        self.failure_policy = FailurePolicy(self.run_config.failure_config.max_failures)
        self.backend: Backend = spec.backend_config.backend_cls()
        # Defaults (result.json, progress.csv) first, then RunConfig(callbacks=...).
        self.callbacks = CallbackRunner.with_defaults(self.run_config.callbacks)
        self.state = RunState.INITIALIZING
        self.name = self.run_config.name or _fresh_name(spec.trainer_name)
        root = _storage.Storage.from_path(_default_storage(self.run_config),
                                          self.run_config.storage_filesystem)
        self.storage = _storage.Storage(root.fs, _storage.join(root.root, self.name))
        self.record = RunRecord(self.storage, self.name)
        self.manager = CheckpointManager(self.run_config.checkpoint_config)
        self.group: Optional[WorkerGroup] = None
        self.tracker: Optional[RoundTracker] = None
        self.failures = 0
        self.attempt = 0
        self.error: Optional[BaseException] = None
        self.last_metrics: Dict[str, Any] = {}
        self._finished_result: Optional[Result] = None
        self._last_progress = time.monotonic()
        if self.run_config.verbose >= 1:
            from engine._internal.progress import FitProgress

            self.callbacks.callbacks.insert(0, FitProgress(
                self.name, self.run_config.verbose, spec.scaling_config.num_workers,
                self.storage.display(), lambda: len(self.manager.tracked),
                self.run_config.checkpoint_config.checkpoint_score_attribute))

    # --- the loop --------------------------------------------------------------
    def run(self) -> Result:
        try:
            while not self.state.terminal:
                self.state = self._step()
        except BaseException as exc:
            self._teardown()
            self.callbacks.end_trial(exc)  # loggers close their files
            raise
        result = self._finished_result or self._build_result()
        self.callbacks.end_run(result, self.error if self.state is RunState.ERRORED else None)
        if self.state is RunState.ERRORED:
            raise TrainingFailedError(_storage.scrub(str(self.error)),
                                      result=result) from self.error
        return result

    def _step(self) -> RunState:
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
        try:
            self.record.load()
        except ValueError as exc:  # json.JSONDecodeError, or a record of the wrong shape
            raise StorageError(
                f"The run record {self.storage.display(self.record.path)} of run "
                f"{self.name!r} is not valid ({type(exc).__name__}: {exc}); nothing was "
                "deleted and its checkpoints are untouched. Restore the file from a backup, "
                "or move it aside to start this run name afresh (its committed "
                "checkpoint_* directories stay usable with Checkpoint.from_directory), or "
                "pick another RunConfig(name=...).") from None
        if self.record.state == RunState.FINISHED.value:
            logger.info("Run %s already finished; returning its result.", self.name)
            self.manager = CheckpointManager.from_json(
                self.run_config.checkpoint_config, self.record.data.get("checkpoints"))
            self._finished_result = self._build_result()
            return RunState.FINISHED
        self.manager = self.record.recover_checkpoints(self.run_config.checkpoint_config)
        self.failures = int(self.record.data.get("failures", 0))
        if not self.manager.enabled:
            warnings.warn(
                "CheckpointConfig(num_to_keep=0): no checkpoint is written, so "
                "Result.checkpoint is None and a retry restarts from scratch.",
                stacklevel=4,
            )
        self.record.begin(self.spec)
        self.record.save(self.manager)
        trial = Trial(trial_id=self.record.trial_id, trial_name=self.name,
                      config=self.spec.train_loop_config or {}, path=self.storage.display(),
                      storage=self.storage)
        self.callbacks.start_run(self.name, self.spec.train_loop_config or {}, trial)
        return RunState.SCHEDULING

    def _schedule(self) -> RunState:
        self.attempt += 1
        self.group = self.worker_group_cls(self.spec.scaling_config, self.spec.worker_env,
                                           needs_data_cpus=bool(self.spec.datasets))
        try:
            self.group.start()
            self.group.check_storage(self.storage)
            self.backend.on_start(self.group, self.spec.backend_config)
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
        latest = self.manager.latest
        if latest is not None:
            start_ckpt = Checkpoint(_storage.join(self.storage.root, latest.dir_name),
                                    self.storage.fs)
            start_ckpt.metrics = latest.metrics
        else:
            start_ckpt = self.spec.resume_from_checkpoint
        start_iteration = self.record.truncate_to(latest.iteration if latest else 0)
        shards = _make_shards(self.spec.datasets, self.spec.data_config, len(group))
        tag = f"{self.attempt:03d}{uuid.uuid4().hex[:6]}"
        session_args = []
        for rank, meta in enumerate(group.meta):
            ctx = TrainContext(
                world_rank=rank, local_rank=meta.local_rank, world_size=len(group),
                local_world_size=meta.local_world_size, node_rank=meta.node_rank,
                trial_name=self.name, trial_id=self.record.trial_id,
                experiment_name=self.name, run_dir=self.storage.display(),
            )
            session_args.append(dict(
                context=ctx, storage=self.storage if self.manager.enabled else None,
                attempt=tag, start_iteration=start_iteration, checkpoint=start_ckpt,
                dataset_shards={k: v[rank] for k, v in shards.items()},
                trial_info={"time_total_s": self.record.time_total_s},
            ))
        group.start_training(self.spec.train_func, self.spec.train_loop_config, session_args,
                             self.spec.backend_config.train_func_wrapper())
        self._last_progress = time.monotonic()
        self.backend.on_training_start(group, self.spec.backend_config)
        self.tracker = RoundTracker(len(group))

    def _poll(self) -> RunState:
        assert self.tracker is not None and self.group is not None
        timeout = _health_timeout()
        results = self.group.poll(timeout)
        if not results:
            return self._on_failure(WorkerError(
                -1, f"no worker answered a health check in {timeout:.0f} s (hung in C code "
                    f"holding the GIL?); raise {constants.HEALTH_CHECK_TIMEOUT_ENV_VAR} if "
                    "that is expected"))
        failure: Optional[BaseException] = None
        for res in results:
            if res.items:
                self._last_progress = time.monotonic()
            for item in res.items:
                self.tracker.add(res.rank, item)
            if res.died is not None and failure is None:
                failure = WorkerError(res.rank, "the worker process died (killed, e.g. by "
                                      f"SIGKILL or the OOM killer, or crashed): {res.died}")
            elif res.error is not None and failure is None:
                failure = WorkerError(res.rank, res.error[0], res.error[1])
            elif res.finished:
                self.tracker.finish(res.rank)
        if failure is not None:
            failed_ranks = {r.rank for r in results if r.error is not None}
            dead = self._drain_healthy(failed_ranks)
            if dead is None and _is_collective_timeout(failure):
                failure = self._diagnose_hang(failure, failed_ranks)
            if dead is not None and not _is_death(failure):
                # A rank's process died and its peers' collectives then broke: the death
                # is the cause worth reporting, the peers' errors are its echo.
                failure = WorkerError(dead.rank, "the worker process died (killed, e.g. by "
                                      f"SIGKILL or the OOM killer, or crashed): {dead.died}; "
                                      f"other ranks then failed: {_first_line(failure)}")
            return self._on_failure(failure)
        stalled = self._check_stall()
        if stalled is not None:
            return self._on_failure(stalled)
        decision = self._process_rounds()
        if decision is None and self.decide is not None:
            decision = self.decide(None)
        if decision is not None and decision.action is not TrialAction.CONTINUE:
            return self._apply_decision(decision)
        mismatch = self.tracker.mismatch()
        if mismatch:
            return self._on_failure(_FatalError(mismatch))
        if self.tracker.all_finished:
            self._teardown(graceful=True)
            self.record.clean_staging()
            self.record.finish(RunState.FINISHED.value, self.manager)
            return RunState.FINISHED
        return RunState.RUNNING

    def _drain_healthy(self, failed_ranks: Optional[set] = None) -> Optional[PollResult]:
        """After a failure, collect what the other ranks already reported, so rounds
        they completed before it still count; return a rank found dead meanwhile.
        Ranks that fail meanwhile are added to ``failed_ranks``."""
        assert self.tracker is not None and self.group is not None
        dead = None
        deadline = time.monotonic() + constants.POLL_TIMEOUT_S * 2
        while time.monotonic() < deadline:
            results = self.group.poll(max(0.0, deadline - time.monotonic()))
            if not results:
                break
            for res in results:
                for item in res.items:
                    self.tracker.add(res.rank, item)
                if res.died is not None and dead is None:
                    dead = res
                if res.error is not None and failed_ranks is not None:
                    failed_ranks.add(res.rank)
        self._process_rounds()
        return dead

    def _check_stall(self) -> Optional[BaseException]:
        """The backend's watchdog (``stall_timeout_s``): no rank reported for that long
        means the group is stuck, e.g. in a collective one rank never entered."""
        limit = self.spec.backend_config.stall_timeout_s
        if limit is None or self.group is None \
                or time.monotonic() - self._last_progress < limit:
            return None
        where = []
        for rank in range(len(self.group)):
            if self.tracker is not None and self.tracker.finished.get(rank):
                continue
            try:
                stack = self.group.worker_call(rank, "train_stack", timeout=5.0)
            except Exception:  # noqa: BLE001 - a diagnosis must not hide the failure
                stack = ""
            where.append(f"rank {rank} was at:\n{stack.rstrip() or '  (no stack)'}")
        name = type(self.spec.backend_config).__name__
        return WorkerError(-1, "\n\n".join(
            [f"no rank reported for {limit:g} s ({name}(timeout_s={limit:g})): the worker "
             "group is hung, e.g. in a collective that a rank never entered. Raise "
             f"{name}(timeout_s=...) if an interval between reports can be that long."]
            + where))

    def _diagnose_hang(self, failure: BaseException, waiting: set) -> BaseException:
        """A collective timed out: name the ranks that waited in it and those that never
        arrived (alive, no error), with where each of those was."""
        assert self.group is not None
        missing = [r for r in range(len(self.group)) if r not in waiting]
        if not missing:
            return failure
        where = []
        for rank in missing:
            try:
                stack = self.group.worker_call(rank, "train_stack", timeout=5.0)
            except Exception:  # noqa: BLE001 - a diagnosis must not hide the failure
                stack = ""
            if stack:
                where.append(f"rank {rank} was at:\n{stack.rstrip()}")
        text = (f"collective timed out: rank{'s' if len(waiting) > 1 else ''} "
                f"{_ranks(waiting)} waited in it past the backend timeout "
                f"(e.g. TorchConfig.timeout_s); rank{'s' if len(missing) > 1 else ''} "
                f"{_ranks(missing)} never arrived")
        assert isinstance(failure, WorkerError)
        detail = "\n\n".join([f"{text}. First error: {failure.message}"] + where)
        return WorkerError(failure.rank, detail, failure.traceback_str)

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
        self.error = error
        self.callbacks.call("on_failure", error)
        decision = self.failure_policy.make_decision(error, self.failures)
        if decision is FailureDecision.RETRY:
            logger.warning("Training failed: %s", _storage.scrub(_first_line(error)))
            return RunState.RESTARTING
        self._teardown()
        self.record.clean_staging()
        self.record.finish(RunState.ERRORED.value, self.manager, error=str(error))
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
            self._adopt(decision.checkpoint)
        if decision.trial_info:
            self.spec.trial_info.update(decision.trial_info)
        if decision.config is not None:
            self.spec.train_loop_config = decision.config
        self.record.begin(self.spec)
        self.record.save(self.manager)
        return RunState.SCHEDULING

    def _adopt(self, ckpt: Checkpoint) -> None:
        """Commit a copy of another run's checkpoint as this run's latest, at this run's
        current iteration (so its history and numbering go on)."""
        st = self.storage
        index = self.manager.next_index
        dest = _storage.join(st.root, self.manager.next_dir_name())
        iteration = int(self.last_metrics.get("training_iteration", 0) or 0)
        with ckpt.as_directory() as local_dir:
            files = st.upload_dir(local_dir, dest)
        if getattr(ckpt, "_owned_tmp", False):
            shutil.rmtree(ckpt.path, ignore_errors=True)
        metrics = dict(ckpt.metrics or {}, training_iteration=iteration)
        marker = {"index": index, "iteration": iteration, "metrics": metrics,
                  "files": files, "committed_at": time.time()}
        st.write_json_atomic(_storage.join(dest, constants.COMMIT_MARKER), marker)
        dropped = self.manager.register(index, iteration, metrics)
        self.record.save(self.manager)  # the record first, then deletions
        for old in dropped:
            st.delete_dir(_storage.join(st.root, old.dir_name))

    # --- rounds and checkpoints -------------------------------------------------
    def _process_rounds(self) -> Optional[TrialDecision]:
        """Record complete rounds; with a ``decide`` hook, return its first decision
        other than CONTINUE (later rounds of this poll are dropped with the group)."""
        assert self.tracker is not None
        for iteration, items in self.tracker.pop_complete():
            metrics = dict(items[0].metrics)
            all_metrics = [items[r].metrics for r in sorted(items)]
            metrics.update(reduce_metrics(all_metrics, self.run_config.metrics_reduce))
            metrics.update(self.record.driver_fields())
            ckpt = None
            if any(item.checkpoint_staging for item in items.values()):
                ckpt = self._commit(iteration, items, metrics)
            self.record.add_round(metrics, all_metrics)
            self.last_metrics = metrics
            self.callbacks.report(metrics, all_metrics, ckpt)
            decision = self.decide(metrics) if self.decide is not None else None
            if decision is not None and decision.action is not TrialAction.CONTINUE:
                return decision
        return None

    def _commit(self, iteration: int, items: Dict[int, ReportItem],
                metrics: Dict[str, Any]) -> Checkpoint:
        st = self.storage
        index = self.manager.next_index
        dest = _storage.join(st.root, self.manager.next_dir_name())
        taken: set = set()
        for rank in sorted(items):
            item = items[rank]
            if not item.checkpoint_staging:
                continue
            if not taken and st.local and not st.exists(dest):
                st.move(item.checkpoint_staging, dest)  # one rename for rank 0's files
                taken.update(item.checkpoint_files)
                continue
            for rel in item.checkpoint_files:
                if rel not in taken:
                    st.move(_storage.join(item.checkpoint_staging, rel), _storage.join(dest, rel))
                    taken.add(rel)
        kept_metrics = {k: v for k, v in metrics.items() if k != "config"}
        taken.update(self._write_checkpoint_extras(dest, index, kept_metrics, taken))
        marker = {"index": index, "iteration": iteration, "metrics": kept_metrics,
                  "files": sorted(taken), "committed_at": time.time()}
        try:
            st.write_json_atomic(_storage.join(dest, constants.COMMIT_MARKER), marker)
        except OSError as exc:
            raise CheckpointError(f"Could not commit checkpoint {dest}: {exc}") from exc
        staging_round = items[min(items)].checkpoint_staging
        for item in items.values():
            if item.checkpoint_staging:
                staging_round = item.checkpoint_staging.rsplit("/", 1)[0]
                break
        st.delete_dir(staging_round)
        dropped = self.manager.register(index, iteration, kept_metrics)
        self.record.save(self.manager)  # the record first, then deletions
        for old in dropped:
            st.delete_dir(_storage.join(st.root, old.dir_name))
        ckpt = Checkpoint(dest, st.fs)
        ckpt.metrics = kept_metrics
        return ckpt

    def _write_checkpoint_extras(self, dest: str, index: int, metrics: Dict[str, Any],
                                 taken: set) -> List[str]:
        """The fitted preprocessor and ``model_card.json``, unless the ranks wrote
        files of those names themselves (theirs are kept)."""
        from engine._internal.data import save_preprocessor

        written = []
        name = save_preprocessor(self.storage, dest, self.spec.preprocessor)
        if name:
            written.append(name)
        if constants.MODEL_CARD_FILE not in taken:
            card = dict(self.spec.model_card)
            card.update(
                metrics=metrics, config=self.record.driver_fields()["config"],
                created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), checkpoint_index=index,
                run_name=self.name, preprocessor=name,
            )
            self.storage.write_json_atomic(_storage.join(dest, constants.MODEL_CARD_FILE), card)
            written.append(constants.MODEL_CARD_FILE)
        return written

    # --- helpers ---------------------------------------------------------------
    def _teardown(self, graceful: bool = False) -> None:
        if self.group is not None:
            try:
                self.backend.on_shutdown(self.group, self.spec.backend_config)
            except Exception:  # a dead group cannot be shut down politely
                pass
            self.group.shutdown(graceful=graceful)
            self.group = None

    def _build_result(self) -> Result:
        st = self.storage

        def to_ckpt(tracked) -> Checkpoint:
            ckpt = Checkpoint(_storage.join(st.root, tracked.dir_name), st.fs)
            ckpt.metrics = tracked.metrics
            return ckpt

        latest = self.manager.latest
        metrics = dict(self.record.last_metrics() or self.last_metrics)
        if metrics:
            metrics["done"] = self.state is RunState.FINISHED
        return Result(
            metrics=metrics,
            checkpoint=to_ckpt(latest) if latest else None,
            best_checkpoints=[(to_ckpt(t), t.metrics) for t in self.manager.best()],
            error=self.error if self.state is RunState.ERRORED else None,
            path=st.display(),
            config=self.spec.train_loop_config,
            num_failures=self.failures,
            history=self.record.history,
            worker_history=self.record.worker_history,
            callback_errors=self.callbacks.errors,
        )




# How a collective that ran past its timeout fails: gloo, torch's DistBackendError,
# NCCL's watchdog, TensorFlow's collective ops.
_COLLECTIVE_TIMEOUT = re.compile(
    r"Timed out waiting|DistBackendError|collective operation timeout|"
    r"DEADLINE_EXCEEDED|Collective ops is aborted", re.IGNORECASE)


def _is_collective_timeout(error: BaseException) -> bool:
    return isinstance(error, WorkerError) and bool(
        _COLLECTIVE_TIMEOUT.search(error.message + "\n" + error.traceback_str))


def _ranks(ranks: Any) -> str:
    ordered = sorted(ranks)
    return ", ".join(str(r) for r in ordered)


def _is_death(error: BaseException) -> bool:
    return isinstance(error, WorkerError) and "process died" in error.message


def _health_timeout() -> float:
    import os

    return float(os.environ.get(constants.HEALTH_CHECK_TIMEOUT_ENV_VAR,
                                constants.DEFAULT_HEALTH_CHECK_TIMEOUT_S))


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _fresh_name(trainer_name: str) -> str:
    return f"{trainer_name}_{time.strftime('%Y-%m-%d_%H-%M-%S')}_{uuid.uuid4().hex[:6]}"


def _default_storage(run_config: RunConfig) -> str:
    import os

    return run_config.storage_path or os.environ.get(
        constants.STORAGE_PATH_ENV_VAR, constants.DEFAULT_STORAGE_PATH)


def _make_shards(datasets: Dict[str, Any], data_config: DataConfig, n: int
                 ) -> Dict[str, List[Any]]:
    if not datasets:
        return {}
    from engine._internal.data import make_shards

    return make_shards(datasets, data_config, n)
