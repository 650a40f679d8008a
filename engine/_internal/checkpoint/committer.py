"""Committing, adopting and deleting a run's checkpoints in storage.

``CheckpointManager`` decides (numbering, retention); this does the I/O, in an order a
driver killed at any point survives:

1. the ranks' staged files move into ``checkpoint_<n>``, with the preprocessor and the
   model card;
2. the run record is saved, holding the checkpoint *and* the round it belongs to in one
   atomic write (a resume keeps the rounds up to its checkpoint, so a record that held
   the checkpoint without its round lost that round for good);
3. the commit marker is written: from now on the checkpoint counts. Until then a resume
   drops it (the record lists it, but its marker is missing) and redoes the round;
4. only then are the checkpoints retention dropped deleted.

A step that fails (a full disk, storage that stays down past its retries) fails the run
with :class:`CommitFailed`: nothing of that checkpoint counts, the bookkeeping is as it
was before, and a later ``fit()`` resumes from the last committed one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import warnings
from typing import Any, Dict, Iterator, List, Optional, Set

from engine import constants
from engine._internal.checkpoint.manager import CheckpointManager, TrackedCheckpoint
from engine._internal.execution.failure_policy import FatalError
from engine._internal.execution.report_handler import Round
from engine._internal.execution.rounds import RoundTracker
from engine._internal.run_state.record import RunRecord
from engine._internal.run_state.spec import RunSpec
from engine._internal.storage import filesystem as _storage
from engine._internal.worker_group.session import ReportItem
from engine.checkpoint import Checkpoint
from engine.exceptions import StorageError
from engine.preprocessors import save_preprocessor

logger = logging.getLogger("engine")


class CommitFailed(FatalError):
    """A complete round's checkpoint could not be committed (e.g. the disk is full).
    Not retried: another attempt would train into the same storage."""


class CheckpointCommitter:
    """The checkpoint manager's storage side, and a report callback: commits the
    checkpoint of each round that staged one."""

    def __init__(self, storage: _storage.Storage, record: RunRecord, spec: RunSpec,
                 name: str) -> None:
        self.storage = storage
        self.record = record
        self.spec = spec
        self.name = name
        self.manager = CheckpointManager(spec.run_config.checkpoint_config)
        # The driver whose lease the commits are made under (its id, host and pid),
        # kept in each commit marker.
        self.written_by: Dict[str, Any] = {}

    # --- state -------------------------------------------------------------------------
    def recover(self) -> None:
        """Resume the bookkeeping of an unfinished (or new) run
        (``RunRecord.recover_checkpoints``)."""
        self.manager = self.record.recover_checkpoints(self.manager.config)
        if not self.manager.enabled:
            warnings.warn(
                "CheckpointConfig(num_to_keep=0): no checkpoint is written, so "
                "Result.checkpoint is None and a retry restarts from scratch.",
                stacklevel=5,  # the trainer's fit(), as when the controller warned
            )

    def load(self) -> None:
        """The bookkeeping of a finished run, as its record holds it."""
        self.manager = CheckpointManager.from_json(self.manager.config,
                                                   self.record.data.get("checkpoints"))

    @property
    def enabled(self) -> bool:
        return self.manager.enabled

    def latest(self) -> Optional[Checkpoint]:
        """The checkpoint a (re)started group resumes from, if any."""
        latest = self.manager.latest
        return self.record.checkpoint(latest) if latest is not None else None

    # --- commits -----------------------------------------------------------------------
    def after_report(self, rnd: Round) -> None:
        if rnd.staged:
            rnd.checkpoint = self.commit(rnd.iteration, rnd.items, rnd.metrics)

    def commit(self, iteration: int, items: Dict[int, ReportItem],
               metrics: Dict[str, Any]) -> Checkpoint:
        """Commit the files every rank staged for ``iteration`` as the next checkpoint.
        The record must already hold the round (``RunRecord.add_round``)."""
        index = self.manager.next_index
        dest = _storage.join(self.storage.root, self.manager.next_dir_name())
        with self._committing(dest, iteration):
            taken = self._move_staged(items, dest)
            kept_metrics = {k: v for k, v in metrics.items() if k != "config"}
            taken.update(self._write_checkpoint_extras(dest, index, kept_metrics, taken))
            dropped = self._publish(dest, index, iteration, kept_metrics, sorted(taken))
        self._delete(dropped)
        staging = staging_round(items)
        if staging:
            self.storage.delete_dir(staging)
        return self._checkpoint(dest, kept_metrics)

    def adopt(self, ckpt: Checkpoint, iteration: int) -> Checkpoint:
        """Commit a copy of another run's checkpoint (PBT's exploit) as this run's latest,
        at this run's ``iteration``, so its history and numbering go on. Returns that
        copy: it lives as long as this run keeps it, whatever the donor's retention."""
        index = self.manager.next_index
        dest = _storage.join(self.storage.root, self.manager.next_dir_name())
        with self._committing(dest, iteration):
            with ckpt.as_directory() as local_dir:
                files = self.storage.upload_dir(local_dir, dest)
            if ckpt.owns_directory:
                shutil.rmtree(ckpt.path, ignore_errors=True)
            metrics = dict(ckpt.metrics or {}, training_iteration=iteration)
            dropped = self._publish(dest, index, iteration, metrics, files)
        self._delete(dropped)
        return self._checkpoint(dest, metrics)

    def free_incomplete_staging(self, tracker: RoundTracker) -> None:
        """Before the rounds completed ahead of a failure are committed, delete what the
        ranks staged for rounds that can no longer complete. The failure may be a full
        disk that those very files filled, and a commit needs room for its record and
        marker: without this the last complete round was lost with the failed one."""
        keep = {staging_round(items) for items in tracker.pending.values()
                if len(items) >= tracker.world_size}
        keep.discard(None)
        if keep:
            self.record.clean_staging(keep=keep)

    def _publish(self, dest: str, index: int, iteration: int, metrics: Dict[str, Any],
                 files: List[str]) -> List[TrackedCheckpoint]:
        """Steps 2-3 of the module docstring for a directory whose files are in place;
        returns what retention dropped, for ``_delete``."""
        st = self.storage
        dropped = self.manager.register(index, iteration, metrics)
        self.record.save(self.manager)
        marker = {"index": index, "iteration": iteration, "metrics": metrics,
                  "files": files, "committed_at": time.time()}
        if self.written_by:
            marker["written_by"] = self.written_by
        st.write_json_atomic(_storage.join(dest, constants.COMMIT_MARKER), marker)
        return dropped

    def _delete(self, dropped: List[TrackedCheckpoint]) -> None:
        """Step 4: after the commit (a failure here is not the commit's)."""
        for old in dropped:
            self.storage.delete_dir(_storage.join(self.storage.root, old.dir_name))

    @contextlib.contextmanager
    def _committing(self, dest: str, iteration: int) -> Iterator[None]:
        """A commit that fails leaves the bookkeeping as before it (a resume drops what
        it wrote: no marker) and fails the run with :class:`CommitFailed`, saying what
        the run keeps and how to go on."""
        tracked = list(self.manager.tracked)
        try:
            yield
        except (OSError, StorageError) as exc:
            self.manager.tracked = tracked
            try:  # no marker, so nothing of it counts; free its room at once
                self.storage.delete_dir(dest)
            except Exception as cleanup:  # noqa: BLE001 - a resume removes it anyway
                logger.warning("Could not remove the uncommitted %s: %s", dest, cleanup)
            latest = self.manager.latest
            keeps = (f"its latest checkpoint is still {latest.dir_name}" if latest
                     else "it has no committed checkpoint")
            raise CommitFailed(
                f"Could not commit {os.path.basename(dest)} (training_iteration "
                f"{iteration}) in {self.storage.display()}: {exc}. Nothing of it counts: "
                f"{keeps}. Free space (or fix the storage), then call fit() again with "
                "the same RunConfig(name, storage_path) to resume."
            ) from exc

    def _move_staged(self, items: Dict[int, ReportItem], dest: str) -> Set[str]:
        """Move every rank's staged files into ``dest``; a file two ranks staged is
        taken from the lowest rank. Returns the relative paths now in ``dest``."""
        st = self.storage
        taken: Set[str] = set()
        for rank in sorted(items):
            item = items[rank]
            if not item.checkpoint_staging:
                continue
            if not item.checkpoint_files:  # an empty checkpoint directory (Ray allows
                continue                    # one): nothing staged, only the marker
            if not taken and st.local and not st.exists(dest):
                st.move(item.checkpoint_staging, dest)  # one rename for rank 0's files
                taken.update(item.checkpoint_files)
                continue
            for rel in item.checkpoint_files:
                if rel not in taken:
                    st.move(_storage.join(item.checkpoint_staging, rel),
                            _storage.join(dest, rel))
                    taken.add(rel)
        return taken

    def _write_checkpoint_extras(self, dest: str, index: int, metrics: Dict[str, Any],
                                 taken: Set[str]) -> List[str]:
        """The fitted preprocessor and ``model_card.json``, unless the ranks wrote
        files of those names themselves (theirs are kept)."""
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

    def _checkpoint(self, path: str, metrics: Dict[str, Any]) -> Checkpoint:
        ckpt = Checkpoint(path, self.storage.fs)
        ckpt.metrics = metrics
        return ckpt


def staging_round(items: Dict[int, ReportItem]) -> Optional[str]:
    """The staging directory of a round (its ranks' staging directories' parent)."""
    for item in items.values():
        if item.checkpoint_staging:
            return item.checkpoint_staging.rsplit("/", 1)[0]
    return None
