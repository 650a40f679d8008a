"""The per-worker session: what ``report()``, ``get_checkpoint()`` and friends act on.

One session lives in each worker process while ``train_func`` runs (in a thread). A
metrics-only ``report()`` validates and enqueues, nothing more, so it never stalls the
loop; the driver drains the queue with a long poll. A report with a checkpoint first
writes this rank's files straight to the run's staging area in storage.
"""

from __future__ import annotations

import datetime
import math
import os
import queue
import shutil
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from engine import constants
from engine._internal.storage.filesystem import Storage, join
from engine.checkpoint import Checkpoint

_SCALARS = (int, float, bool, str, type(None))


@dataclass
class TrainContext:
    """What a worker knows about its place in the group and the run."""

    world_rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0
    trial_name: str = ""
    trial_id: str = ""
    experiment_name: str = ""
    run_dir: str = ""
    # Where train_func starts (os.chdir), "" to stay put (TRAINYARD_CHDIR_TO_TRIAL_DIR=0).
    working_dir: str = ""
    # The resource bundles of the run: the trainer's, then one per worker.
    resource_bundles: List[Dict[str, float]] = field(default_factory=list)

    def get_world_rank(self) -> int:
        return self.world_rank

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_world_size(self) -> int:
        return self.world_size

    def get_local_world_size(self) -> int:
        return self.local_world_size

    def get_node_rank(self) -> int:
        return self.node_rank

    def get_trial_name(self) -> str:
        return self.trial_name

    def get_trial_id(self) -> str:
        return self.trial_id

    def get_experiment_name(self) -> str:
        return self.experiment_name

    def get_trial_dir(self) -> str:
        """The run's (in a Tuner: the trial's) directory: a local path or a URI."""
        return self.run_dir

    def get_trial_resources(self) -> "TrialResources":
        """The resources of this run (trial), as Ray's ``PlacementGroupFactory``:
        ``bundles`` (the trainer's bundle first, then one per worker),
        ``required_resources`` (their sum) and ``head_cpus``."""
        return TrialResources(self.resource_bundles)


class TrialResources:
    """What ``get_context().get_trial_resources()`` returns (the parts of Ray's
    ``PlacementGroupFactory`` that a training function reads)."""

    def __init__(self, bundles: List[Dict[str, float]], strategy: str = "PACK") -> None:
        self.bundles = [dict(b) for b in bundles]
        self.strategy = strategy

    @property
    def head_bundle_is_empty(self) -> bool:
        return not self.bundles or not any(self.bundles[0].values())

    @property
    def head_cpus(self) -> float:
        return float(self.bundles[0].get("CPU", 0.0)) if self.bundles else 0.0

    @property
    def required_resources(self) -> Dict[str, float]:
        total: Dict[str, float] = {}
        for bundle in self.bundles:
            for key, value in bundle.items():
                total[key] = total.get(key, 0.0) + float(value)
        return total

    def __repr__(self) -> str:
        return f"TrialResources(bundles={self.bundles}, strategy={self.strategy!r})"


def working_dir(storage: Storage, experiment: str, run_name: str) -> str:
    """Where a run's workers start ``train_func``, as Ray Tune chdirs into the trial's
    directory (so relative paths of concurrent trials do not collide): the run directory
    on local storage, else ``<tmp>/trainyard_trials/<experiment>/<run>``; "" when
    ``TRAINYARD_CHDIR_TO_TRIAL_DIR=0`` (or Ray's ``RAY_CHDIR_TO_TRIAL_DIR=0``)."""
    if not constants.get(constants.CHDIR_TO_TRIAL_DIR_ENV_VAR) \
            or os.environ.get(constants.RAY_CHDIR_TO_TRIAL_DIR_ENV_VAR, "1").strip() == "0":
        return ""
    if storage.local:
        return storage.root
    import tempfile

    return os.path.join(tempfile.gettempdir(), "trainyard_trials", experiment, run_name)


def resource_bundles(scaling: Any) -> List[Dict[str, float]]:
    """A run's bundles as Ray's PlacementGroupFactory lists them: the trainer's first
    (empty unless ``trainer_resources``), then one per worker."""
    head = {k: float(v) for k, v in (scaling.trainer_resources or {}).items()}
    return [head] + [dict(scaling.worker_resources) for _ in range(scaling.num_workers)]


@dataclass
class ReportItem:
    """One report of one rank, as sent to the driver."""

    iteration: int
    metrics: Dict[str, Any]
    checkpoint_staging: Optional[str] = None  # storage path of this rank's staged files
    checkpoint_files: List[str] = field(default_factory=list)


def plain_metrics(metrics: Any) -> Any:
    """``metrics`` with NumPy scalars (``np.float32(0.5)``, ``np.int64(3)``: what
    ``arr.mean()`` returns) as the Python numbers they hold, as Ray takes them; arrays
    and tensors are left for :func:`validate_metrics` to refuse, naming the key."""
    if isinstance(metrics, dict):
        return {k: plain_metrics(v) for k, v in metrics.items()}
    if isinstance(metrics, (list, tuple)):
        return type(metrics)(plain_metrics(v) for v in metrics)
    if type(metrics).__module__ == "numpy" and getattr(metrics, "shape", None) == () \
            and hasattr(metrics, "item") and not hasattr(metrics, "__len__"):
        return metrics.item()
    return metrics


def validate_metrics(metrics: Any, prefix: str = "") -> None:
    """Raise TypeError naming the key whose value is not a plain JSON-able value."""
    if not isinstance(metrics, dict):
        raise TypeError(
            f"report() takes a dict of metrics, got {type(metrics).__name__}: "
            "call report({'loss': loss_value})."
        )
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if not isinstance(key, str):
            raise TypeError(f"report(): metric key {name!r} must be a str.")
        _validate_value(value, name)


def _validate_value(value: Any, name: str) -> None:
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, dict):
        validate_metrics(value, prefix=f"{name}.")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _validate_value(item, f"{name}[{i}]")
        return
    hint = ""
    if hasattr(value, "item") and hasattr(value, "shape"):
        hint = " Convert it with .item() (a scalar) or .tolist()."
    raise TypeError(
        f"report(): metric {name!r} has type {type(value).__module__}."
        f"{type(value).__name__}; metric values must be int, float, bool, str, None, or "
        f"lists/dicts of those.{hint}"
    )


class TrainSession:
    """Worker-side state of one run of ``train_func``."""

    def __init__(self, context: TrainContext, storage: Optional[Storage], attempt: str,
                 start_iteration: int = 0, checkpoint: Any = None,
                 dataset_shards: Optional[Dict[str, Any]] = None,
                 trial_info: Optional[Dict[str, Any]] = None,
                 output: Any = None) -> None:
        self.context = context
        self.output = output  # output_capture.OutputFiles: RunConfig(log_to_file=...)
        self.storage = storage
        self.attempt = attempt
        self.iteration = start_iteration
        self.iterations_since_restore = 0
        self.checkpoint = checkpoint
        self.dataset_shards = dataset_shards or {}
        self.trial_info = trial_info or {}
        self.queue: "queue.Queue[ReportItem]" = queue.Queue(maxsize=constants.REPORT_QUEUE_MAX)
        self.start_time = time.time()
        self.time_total_offset = float(self.trial_info.get("time_total_s", 0.0))
        self._last_report_time = self.start_time
        self._hostname = socket.gethostname()
        self._node_ip = self.trial_info.get("node_ip", "")
        self._pid = os.getpid()
        self.finished = threading.Event()
        self.error: Optional[BaseException] = None
        self.traceback_str = ""
        self.extra: Dict[str, Any] = {}  # per-framework state (e.g. AMP scaler)

    # --- report ----------------------------------------------------------------
    def report(self, metrics: Dict[str, Any], checkpoint: Any = None) -> None:
        metrics = plain_metrics(metrics)
        validate_metrics(metrics)
        now = time.time()
        self.iteration += 1
        self.iterations_since_restore += 1
        out = dict(metrics)
        time_since_restore = now - self.start_time
        out.update(
            training_iteration=self.iteration,
            time_this_iter_s=now - self._last_report_time,
            time_total_s=self.time_total_offset + time_since_restore,
            timestamp=int(now),
            date=datetime.datetime.fromtimestamp(now).strftime("%Y-%m-%d_%H-%M-%S"),
            hostname=self._hostname,
            node_ip=self._node_ip,
            pid=self._pid,
            iterations_since_restore=self.iterations_since_restore,
            time_since_restore=time_since_restore,
        )
        self._seed_fields(out, now)
        self._last_report_time = now
        item = ReportItem(iteration=self.iteration, metrics=out)
        if checkpoint is not None:
            self._stage_checkpoint(checkpoint, item)
        self.queue.put(item)

    def _seed_fields(self, out: Dict[str, Any], now: float) -> None:
        """The seed pages' other automatic fields: the Train session's ``_timestamp``,
        ``_time_this_iter_s``, ``_training_iteration``, and Tune's ``timesteps_*``,
        ``episodes_total`` (a reported value wins, as in Ray) and ``warmup_time``
        (seconds from the worker group's scheduling to this session's start)."""
        out["_timestamp"] = int(now)
        out["_time_this_iter_s"] = now - self._last_report_time
        out["_training_iteration"] = self.iteration
        out.setdefault("timesteps_total", None)
        out.setdefault("episodes_total", None)
        out.setdefault("timesteps_since_restore", 0)
        out["warmup_time"] = self.warmup_time

    @property
    def warmup_time(self) -> float:
        scheduled = self.trial_info.get("scheduled_at")
        return max(0.0, self.start_time - float(scheduled)) if scheduled else 0.0

    def _stage_checkpoint(self, checkpoint: Any, item: ReportItem) -> None:
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(
                f"report(checkpoint=...) takes an engine.Checkpoint, got "
                f"{type(checkpoint).__name__}: wrap a directory with "
                "Checkpoint.from_directory(path) or a dict with Checkpoint.from_dict(d)."
            )
        if self.storage is None:  # checkpointing disabled (num_to_keep=0)
            self._discard(checkpoint)
            return
        staging = join(self.storage.root, constants.STAGING_DIR,
                       f"{self.attempt}_{self.iteration:06d}", f"rank_{self.context.world_rank}")
        with checkpoint.as_directory() as local_dir:
            item.checkpoint_files = self.storage.upload_dir(local_dir, staging)
        item.checkpoint_staging = staging
        self._discard(checkpoint)

    @staticmethod
    def _discard(checkpoint: Checkpoint) -> None:
        if checkpoint.owns_directory:
            shutil.rmtree(checkpoint.path, ignore_errors=True)

    def mark_finished(self) -> None:
        """Called once ``train_func`` returned or raised; wakes a waiting poll."""
        self.finished.set()
        self.queue.put(_FINISHED)  # type: ignore[arg-type]

    def drain(self, timeout: float) -> Tuple[List[ReportItem], bool]:
        """Reports queued so far (waiting up to ``timeout`` for the first) and whether
        ``train_func`` has ended with all of its reports drained."""
        items: List[ReportItem] = []
        done = False
        try:
            first = self.queue.get(timeout=timeout) if timeout > 0 else self.queue.get_nowait()
        except queue.Empty:
            return items, False
        # Batch what follows within a short window (constants.REPORT_BATCH_WINDOW_S);
        # a checkpoint or the end of training is handed over at once.
        window_end = time.monotonic() + (constants.REPORT_BATCH_WINDOW_S if timeout > 0
                                         else 0.0)
        pending = [first]
        while True:
            for item in pending:
                if item is _FINISHED:
                    done = True
                else:
                    items.append(item)
            if done or items[-1].checkpoint_staging:
                wait = 0.0
            else:
                wait = window_end - time.monotonic()
            try:
                pending = [self.queue.get(timeout=wait) if wait > 0
                           else self.queue.get_nowait()]
            except queue.Empty:
                return items, done


_FINISHED = object()
_session: Optional[TrainSession] = None
_session_lock = threading.Lock()


def init_session(session: TrainSession) -> None:
    global _session
    with _session_lock:
        _session = session


def shutdown_session() -> None:
    global _session
    with _session_lock:
        _session = None


def get_session() -> Optional[TrainSession]:
    return _session


def require_session(fn_name: str) -> TrainSession:
    if _session is None:
        raise RuntimeError(
            f"engine.{fn_name}() can only be called inside a training function run by a "
            "trainer (e.g. TorchTrainer(train_func).fit())."
        )
    return _session


def is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
