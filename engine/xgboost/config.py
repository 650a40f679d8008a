"""XGBoostConfig and the backend that joins the workers through XGBoost's collective.

Per attempt, the driver starts a ``RabitTracker`` on a free port of its node; each
worker gets the tracker's address and a task id that sorts like its world rank (so
XGBoost's rank is the engine's rank), and the training function runs inside
``xgboost.collective.CommunicatorContext``: ``xgboost.train`` then allreduces its
histograms and metrics across the workers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

from engine._internal.backend import Backend
from engine._internal.gbdt.config import (GBDTConfig, get_worker_params, import_framework,
                                          set_worker_params)

if TYPE_CHECKING:
    from engine._internal.worker_group import WorkerGroup

logger = logging.getLogger("engine")

_INSTALL_HINT = "engine.xgboost needs XGBoost: pip install 'trainyard[xgboost]'"


def import_xgboost() -> Any:
    """``import xgboost`` with an install hint when it is missing."""
    return import_framework("xgboost", _INSTALL_HINT)


class XGBoostBackend(Backend):
    """Starts a tracker per attempt on the driver and hands its address to the workers."""

    def __init__(self) -> None:
        self._tracker: Any = None

    def on_start(self, worker_group: "WorkerGroup", backend_config: XGBoostConfig) -> None:
        import ray

        import_xgboost()
        from xgboost.tracker import RabitTracker

        self._free_tracker()  # a previous attempt's
        host = ray.util.get_node_ip_address()
        # sortby="task": ranks follow dmlc_task_id, which sorts like the world rank.
        tracker = RabitTracker(n_workers=len(worker_group), host_ip=host, sortby="task")
        tracker.start()
        self._tracker = tracker
        args = dict(tracker.worker_args(), dmlc_timeout=int(backend_config.timeout_s))
        ray.get([actor.execute.remote(set_worker_params, "xgboost",
                                      dict(args, dmlc_task_id=f"[trainyard-rank={r:08d}]"))
                 for r, actor in enumerate(worker_group.actors)])

    def on_shutdown(self, worker_group: "WorkerGroup", backend_config: XGBoostConfig) -> None:
        self._free_tracker()

    def _free_tracker(self) -> None:
        tracker, self._tracker = self._tracker, None
        if tracker is None:
            return
        try:
            tracker.free()
        except Exception as exc:  # workers died or were stopped mid-run: expected
            logger.debug("XGBoost tracker stopped with: %s", str(exc).splitlines()[0])


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


# --- worker side -------------------------------------------------------------------------
def get_collective_args() -> Optional[Dict[str, Any]]:
    """The ``xgboost.collective`` arguments the backend gave this worker (None outside
    an XGBoostTrainer's worker)."""
    return get_worker_params("xgboost")


def run_in_collective(train_func: Callable, config: Optional[Dict[str, Any]]) -> Any:
    """Run ``train_func`` inside XGBoost's communicator (what every worker of an
    XGBoostTrainer runs)."""
    from engine._internal.worker import _call_train_func

    args = get_collective_args()
    if args is None:
        raise RuntimeError("No XGBoost collective was set up for this worker: run it "
                           "through XGBoostTrainer (its backend starts the tracker).")
    import_xgboost()
    from xgboost import collective

    from engine._internal import timeline

    with collective.CommunicatorContext(**args):
        timeline.mark("collective_joined")
        return _call_train_func(train_func, config)
