"""XGBoostConfig and the backend that joins the workers through XGBoost's collective.

Per attempt, rank 0 starts a ``RabitTracker`` on a free port of its node while every
worker imports XGBoost (which each needs to train anyway), so the driver never imports
XGBoost for a fit: that import (about 1.5 CPU-seconds, scikit-learn with it) ran in the
driver before the workers' own, on the same CPUs. Each worker then gets the tracker's
address and a task id that sorts like its world rank (so XGBoost's rank is the engine's
rank), and the training function runs inside ``xgboost.collective.CommunicatorContext``:
``xgboost.train`` then allreduces its histograms and metrics across the workers. Ray
Train runs the tracker in its driver; on rank 0 it is also reachable when the driver is
not (a Ray Client driver outside the cluster), and it ends with the attempt's workers.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, Optional

from engine._internal.gbdt.config import (GBDTConfig, get_worker_params, import_framework,
                                          set_worker_params)
from engine._internal.worker_group.backend import Backend

if TYPE_CHECKING:
    from engine._internal.worker_group.group import WorkerGroup

logger = logging.getLogger("engine")

_INSTALL_HINT = "engine.xgboost needs XGBoost: pip install 'trainyard[xgboost]'"


def import_xgboost() -> Any:
    """``import xgboost`` with an install hint when it is missing."""
    return import_framework("xgboost", _INSTALL_HINT)


class XGBoostBackend(Backend):
    """Has rank 0 start a tracker per attempt and hands its address to the workers."""

    def on_start(self, worker_group: "WorkerGroup", backend_config: XGBoostConfig) -> None:
        import ray

        # Every worker imports XGBoost at the same time; rank 0 also starts the tracker
        # (a previous attempt's or trial's, on a reused worker, is freed first).
        refs = [actor.execute.remote(_prepare_collective, len(worker_group), rank == 0)
                for rank, actor in enumerate(worker_group.actors)]
        args = dict(ray.get(refs)[0], dmlc_timeout=int(backend_config.timeout_s))
        ray.get([actor.execute.remote(set_worker_params, "xgboost",
                                      dict(args, dmlc_task_id=f"[trainyard-rank={r:08d}]"))
                 for r, actor in enumerate(worker_group.actors)])

    def on_shutdown(self, worker_group: "WorkerGroup", backend_config: XGBoostConfig) -> None:
        import ray

        if len(worker_group):  # a dead rank 0 took its tracker with it: the caller copes
            ray.get(worker_group.actors[0].execute.remote(free_tracker), timeout=10)


@dataclass
class XGBoostConfig(GBDTConfig):
    """How the workers' XGBoost collective is set up.

    Args:
        timeout_s: Seconds one collective operation (an allreduce of a round's
            histograms) may wait for the other workers before it fails the run
            (XGBoost's ``dmlc_timeout``). A worker that dies is noticed at once anyway.

    Raises:
        ConfigError: ``timeout_s`` is not an integer > 0.
    """

    _backend = XGBoostBackend
    REUSABLE_WORKERS: ClassVar[bool] = True  # worker_group.reset frees tracker and communicator


# --- worker side -------------------------------------------------------------------------
_tracker: Any = None  # the RabitTracker this worker runs (rank 0 of an attempt)
_tracker_lock = threading.Lock()


def _prepare_collective(n_workers: int, runs_tracker: bool) -> Optional[Dict[str, Any]]:
    """On each worker before training: import XGBoost; on rank 0 (``runs_tracker``),
    start the attempt's tracker on this node and return what workers need to join it."""
    import_xgboost()
    if not runs_tracker:
        return None
    import ray
    from xgboost.tracker import RabitTracker

    global _tracker
    with _tracker_lock:
        _free_tracker_locked()
        # sortby="task": ranks follow dmlc_task_id, which sorts like the world rank.
        tracker = RabitTracker(n_workers=n_workers, host_ip=ray.util.get_node_ip_address(),
                               sortby="task")
        tracker.start()
        _tracker = tracker
        return tracker.worker_args()


def free_tracker() -> None:
    """Stop the tracker this worker runs, if any (the attempt or trial has ended)."""
    with _tracker_lock:
        _free_tracker_locked()


def _free_tracker_locked() -> None:
    global _tracker
    tracker, _tracker = _tracker, None
    if tracker is None:
        return
    try:
        tracker.free()
    except Exception as exc:  # workers died or were stopped mid-run: expected
        logger.debug("XGBoost tracker stopped with: %s", str(exc).splitlines()[0])


def get_collective_args() -> Optional[Dict[str, Any]]:
    """The ``xgboost.collective`` arguments the backend gave this worker (None outside
    an XGBoostTrainer's worker)."""
    return get_worker_params("xgboost")


def run_in_collective(train_func: Callable, config: Optional[Dict[str, Any]]) -> Any:
    """Run ``train_func`` inside XGBoost's communicator (what every worker of an
    XGBoostTrainer runs)."""
    from engine._internal.worker_group.worker import _call_train_func

    args = get_collective_args()
    if args is None:
        raise RuntimeError("No XGBoost collective was set up for this worker: run it "
                           "through XGBoostTrainer (its backend starts the tracker).")
    import_xgboost()
    from xgboost import collective

    from engine._internal.run_state import timeline

    with collective.CommunicatorContext(**args):
        timeline.mark("collective_joined")
        return _call_train_func(train_func, config)
