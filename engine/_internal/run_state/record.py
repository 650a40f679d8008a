"""The run record: a versioned JSON snapshot of a run, written atomically.

It holds the state, the committed checkpoints with their scores, and every round's
metrics (rank 0's and all ranks'). It is written with each checkpoint, before that
checkpoint's commit marker and before any old checkpoint is deleted, so a crash at any
point leaves a record that a resume can trust (see ``checkpoint.committer``); checkpoint
directories committed after the last snapshot are adopted from their commit markers.
It also builds the ``Result`` a run (or a Tuner's stored trial) returns.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set

from engine import constants
from engine._internal.checkpoint.manager import CheckpointManager, TrackedCheckpoint
from engine._internal.run_state.identity import run_identity
from engine._internal.storage.filesystem import Storage, join, scrub
from engine.checkpoint import Checkpoint
from engine.config import CheckpointConfig
from engine.exceptions import StorageError
from engine.result import Result

if TYPE_CHECKING:
    from engine._internal.execution.report_handler import Round

logger = logging.getLogger("engine")


class RunRecord:
    def __init__(self, storage: Storage, name: str) -> None:
        self.storage = storage
        self.name = name
        self.path = join(storage.root, constants.RUN_STATE_FILE)
        self.data: Dict[str, Any] = {}
        self.history: List[Dict[str, Any]] = []
        self.worker_history: List[List[Dict[str, Any]]] = []
        self.trial_id = ""
        self.experiment_id = ""
        self._config_json: Any = None
        self._restoring = False

    # --- lifecycle -------------------------------------------------------------
    def load(self) -> None:
        """Read the record, or start a new one when there is none.

        Raises:
            StorageError: The record is not valid JSON or not a record; nothing is touched.
        """
        try:
            data = self.storage.read_json(self.path)
            self._apply(data)
        except ValueError as exc:  # json.JSONDecodeError, or a record of the wrong shape
            raise StorageError(
                f"The run record {self.storage.display(self.path)} of run "
                f"{self.name!r} is not valid ({type(exc).__name__}: {exc}); nothing was "
                "deleted and its checkpoints are untouched. Restore the file from a backup, "
                "or move it aside to start this run name afresh (its committed "
                "checkpoint_* directories stay usable with Checkpoint.from_directory), or "
                "pick another RunConfig(name=...).") from None

    def _apply(self, data: Optional[Dict[str, Any]]) -> None:
        if data is None:
            self.data = {"version": constants.RUN_STATE_VERSION, "name": self.name,
                         "state": "NEW", "created_at": time.time(), "failures": 0,
                         "experiment_id": uuid.uuid4().hex,
                         "trial_id": f"{uuid.uuid4().hex[:5]}_00000"}
        else:
            if data.get("version", 0) > constants.RUN_STATE_VERSION:
                raise RuntimeError(
                    f"{self.path} was written by a newer trainyard (record version "
                    f"{data['version']}); upgrade trainyard to resume this run."
                )
            self.data = data
            if data.get("state") not in ("NEW", "FINISHED"):
                # fit() again on a run that did not finish: a restore (kept once saved).
                tracked = (data.get("checkpoints") or {}).get("checkpoints") or [{}]
                latest = max(tracked, key=lambda t: t.get("index", -1))
                data["restores"] = int(data.get("restores", 0)) + 1
                data["last_restore"] = {"at": time.time(), "previous_state": data["state"],
                                        "checkpoint": latest.get("dir_name")}
                self._restoring = True
            self.history = list(data.get("history", []))
            self.worker_history = list(data.get("worker_history", []))
        self.trial_id = self.data["trial_id"]
        self.experiment_id = self.data["experiment_id"]

    @property
    def state(self) -> str:
        return self.data.get("state", "NEW")

    @property
    def time_total_s(self) -> float:
        return float(self.history[-1].get("time_total_s", 0.0)) if self.history else 0.0

    def begin(self, spec: Any) -> None:
        self._config_json = _jsonable(spec.train_loop_config or {})
        self.data.update(state="RUNNING", trainer=spec.trainer_name,
                         config=self._config_json, started_at=time.time(),
                         identity=run_identity(spec))
        info = getattr(spec, "trial_info", None) or {}  # a Tuner's ids and tag
        for key in ("trial_id", "experiment_id", "experiment_tag"):
            if info.get(key) is not None:
                self.data[key] = str(info[key])
        self.trial_id = self.data["trial_id"]
        self.experiment_id = self.data["experiment_id"]

    def driver_fields(self) -> Dict[str, Any]:
        return {"trial_id": self.trial_id, "experiment_id": self.experiment_id,
                "experiment_tag": self.data.get("experiment_tag", "0"),
                "config": self._config_json or {}, "done": False}

    def add_round(self, metrics: Dict[str, Any], all_ranks: List[Dict[str, Any]]) -> None:
        self.history.append({k: v for k, v in metrics.items() if k != "config"})
        self.worker_history.append(all_ranks[1:])

    def after_report(self, rnd: "Round") -> None:
        """A report callback: the round's row, before its checkpoint is committed."""
        self.add_round(rnd.metrics, rnd.all_metrics)

    def last_metrics(self) -> Optional[Dict[str, Any]]:
        if not self.history:
            return None
        out = dict(self.history[-1])
        out["config"] = self._config_json if self._config_json is not None \
            else self.data.get("config", {})
        return out

    def truncate_to(self, iteration: int) -> int:
        """Forget rounds after ``iteration`` (a restart redoes them); return the
        iteration training continues from."""
        # Rows before an adopted checkpoint (PBT) are the trial's past, whatever their
        # training_iteration: only rows after the adoption can be redone.
        floor = min(int(self.data.get("kept_rows", 0)), len(self.history))
        keep = [i for i, row in enumerate(self.history)
                if i < floor or row.get("training_iteration", 0) <= iteration]
        n = len(keep)
        self.history = self.history[:n]
        self.worker_history = self.worker_history[:n]
        return iteration

    def keep_rows(self) -> None:
        """Keep every row so far through later restarts: the run adopted another run's
        checkpoint (PBT), whose ``training_iteration`` may be below this run's."""
        self.data["kept_rows"] = len(self.history)

    # --- checkpoints -------------------------------------------------------------
    def recover_checkpoints(self, config: CheckpointConfig) -> CheckpointManager:
        """Trust the record, adopt committed directories it missed, drop uncommitted ones,
        and give every committed checkpoint's round its row."""
        manager = CheckpointManager.from_json(config, self.data.get("checkpoints"))
        known = {t.dir_name for t in manager.tracked}
        st = self.storage
        for name in st.list_dir(st.root):
            if not name.startswith(constants.CHECKPOINT_DIR_PREFIX):
                continue
            marker = st.read_json(join(st.root, name, constants.COMMIT_MARKER))
            if marker is None:
                logger.warning("Removing uncommitted checkpoint directory %s.", name)
                st.delete_dir(join(st.root, name))
            elif name not in known:
                manager.tracked.append(TrackedCheckpoint(
                    index=marker["index"], iteration=marker["iteration"], dir_name=name,
                    metrics=marker.get("metrics", {})))
                manager.next_index = max(manager.next_index, marker["index"] + 1)
        _drop_uncommitted(manager, lambda t: st.exists(
            join(st.root, t.dir_name, constants.COMMIT_MARKER)))
        self._restore_rounds(manager)
        if self._restoring:  # name the checkpoint this resume really starts from
            latest = manager.latest
            self.data["last_restore"]["checkpoint"] = latest.dir_name if latest else None
        self.clean_staging()
        return manager

    def _restore_rounds(self, manager: CheckpointManager) -> None:
        """Rebuild the row of a committed checkpoint's round from its marker's metrics
        (the row, less ``config``). Records of earlier trainyard versions can lack it:
        they saved a checkpoint before its round's row, and a driver killed in between
        lost that round for good (a resume keeps only the rounds up to its checkpoint)."""
        have = {row.get("training_iteration") for row in self.history}
        for tracked in sorted(manager.tracked, key=lambda t: t.iteration):
            if tracked.iteration <= 0 or tracked.iteration in have:
                continue
            row = dict(tracked.metrics)
            row.setdefault("training_iteration", tracked.iteration)
            at = sum(1 for r in self.history
                     if r.get("training_iteration", 0) < tracked.iteration)
            self.history.insert(at, row)
            if len(self.worker_history) >= at:
                self.worker_history.insert(at, [])  # other ranks' metrics were not kept
            have.add(tracked.iteration)
            logger.info("Rebuilt the row of round %d from the commit marker of %s.",
                        tracked.iteration, tracked.dir_name)

    def keep_rank0_timeline(self, group: Any) -> None:
        """Put rank 0's marks of this attempt in the record (``timeline.rank0``), next
        to the driver's. Best effort: a timeline never fails a run."""
        try:
            marks = group.worker_call(0, "timeline", timeout=5.0)
            self.data["timeline"] = {"rank0": marks}
        except Exception as exc:  # noqa: BLE001 - diagnostics only
            logger.debug("No timeline from rank 0: %s", exc)

    def clean_staging(self, keep: Optional[Set[str]] = None) -> None:
        """Delete the staging area (but the rounds' directories in ``keep``). A worker
        killed a moment ago (a stop decision kills the group mid-loop) may still be
        finishing a file there: retry briefly, then leave it for the next start, which
        cleans it again."""
        path = join(self.storage.root, constants.STAGING_DIR)
        for attempt in range(5):
            try:
                if keep is None:
                    self.storage.delete_dir(path)
                    return
                for name in self.storage.list_dir(path):
                    if join(path, name) not in keep:
                        self.storage.delete_dir(join(path, name))
                return
            except (OSError, StorageError) as exc:
                error = exc
                time.sleep(0.2 * (attempt + 1))
        logger.warning("Could not clean %s yet (%s); the next start cleans it.",
                       self.storage.display(path), error)

    # --- snapshots ---------------------------------------------------------------
    def save(self, manager: CheckpointManager) -> None:
        self.data["checkpoints"] = manager.to_json()
        self.data["history"] = self.history
        self.data["worker_history"] = self.worker_history
        self.data["updated_at"] = time.time()
        self.storage.write_json_atomic(self.path, self.data)

    def finish(self, state: str, manager: CheckpointManager, error: Optional[str] = None
               ) -> None:
        self.data["state"] = state
        if error is not None:
            self.data["error"] = scrub(error)[:10_000]  # no credentials in the record
        self.save(manager)

    # --- results -----------------------------------------------------------------
    def checkpoint(self, tracked: TrackedCheckpoint) -> Checkpoint:
        """A committed checkpoint of this run, with the metrics it was reported with."""
        ckpt = Checkpoint(join(self.storage.root, tracked.dir_name), self.storage.fs)
        ckpt.metrics = tracked.metrics
        return ckpt

    def build_result(self, manager: CheckpointManager, *, done: bool,
                     config: Optional[Dict[str, Any]], error: Optional[BaseException] = None,
                     failures: int = 0, callback_errors: Optional[List[str]] = None,
                     fallback_metrics: Optional[Dict[str, Any]] = None) -> Result:
        """The run's ``Result``: its last round's metrics (``fallback_metrics`` when it
        holds none), its checkpoints and its history."""
        latest = manager.latest
        metrics = dict(self.last_metrics() or fallback_metrics or {})
        if metrics:
            metrics["done"] = done
        return Result(
            metrics=metrics,
            checkpoint=self.checkpoint(latest) if latest else None,
            best_checkpoints=[(self.checkpoint(t), t.metrics) for t in manager.best()],
            error=error,
            path=self.storage.display(),
            config=config,
            num_failures=failures,
            history=self.history,
            worker_history=self.worker_history,
            callback_errors=callback_errors if callback_errors is not None else [],
        )

    def stored_result(self, config: CheckpointConfig,
                      train_loop_config: Optional[Dict[str, Any]],
                      error: Optional[BaseException] = None) -> Result:
        """The ``Result`` a stored run holds, read without running anything (a Tuner's
        restored trial); ``metrics["done"]`` only when it finished."""
        self.load()
        manager = CheckpointManager.from_json(config, self.data.get("checkpoints"))
        return self.build_result(manager, done=error is None and self.state == "FINISHED",
                                 config=train_loop_config, error=error,
                                 failures=int(self.data.get("failures", 0)))


def _drop_uncommitted(manager: CheckpointManager, committed: Any) -> None:
    """Forget the checkpoints the record lists but whose marker is missing: they cannot
    be trusted. The newest of them were registered just before the driver died, before
    their marker was written: their numbers were never used and are free again."""
    ok = {t.index: bool(committed(t)) for t in manager.tracked}
    kept = [t for t in manager.tracked if ok[t.index]]
    newest = max((t.index for t in kept), default=-1)
    pending = [t.index for t in manager.tracked if not ok[t.index] and t.index > newest]
    if pending:
        manager.next_index = min(pending)
    manager.tracked = kept


def _jsonable(obj: Any) -> Any:
    try:
        json.dumps(obj)
        return obj
    except (TypeError, ValueError):
        if isinstance(obj, dict):
            return {str(k): _jsonable(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [_jsonable(v) for v in obj]
        return repr(obj)
