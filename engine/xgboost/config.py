"""XGBoostConfig and the backend that joins the workers through XGBoost's collective.

Per attempt, the driver starts a ``RabitTracker`` on a free port of its node; each
worker gets the tracker's address and a task id that sorts like its world rank (so
XGBoost's rank is the engine's rank), and the training function runs inside
``xgboost.collective.CommunicatorContext``: ``xgboost.train`` then allreduces its
histograms and metrics across the workers.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

from engine._internal.backend import Backend, BackendConfig
from engine.exceptions import ConfigError

if TYPE_CHECKING:
    from engine._internal.worker_group import WorkerGroup

logger = logging.getLogger("engine")

_INSTALL_HINT = "engine.xgboost needs XGBoost: pip install 'trainyard[xgboost]'"


def import_xgboost() -> Any:
    """``import xgboost`` with an install hint when it is missing."""
    try:
        import xgboost
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return xgboost


@dataclass
class XGBoostConfig(BackendConfig):
    """How the workers' XGBoost collective is set up.

    Args:
        timeout_s: Seconds one collective operation (an allreduce of a round's
            histograms) may wait for the other workers before it fails the run
            (XGBoost's ``dmlc_timeout``). A worker that dies is noticed at once anyway.
    """

    timeout_s: int = 1800

    def __post_init__(self) -> None:
        if not isinstance(self.timeout_s, int) or isinstance(self.timeout_s, bool) \
                or self.timeout_s <= 0:
            raise ConfigError(f"XGBoostConfig(timeout_s={self.timeout_s!r}) must be an "
                              "integer > 0 (seconds).")

    @property
    def backend_cls(self) -> type:
        return XGBoostBackend


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
        ray.get([actor.execute.remote(_set_collective_args,
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


# --- worker side -------------------------------------------------------------------------
_collective_args: Optional[Dict[str, Any]] = None
_args_lock = threading.Lock()


def _set_collective_args(args: Dict[str, Any]) -> None:
    global _collective_args
    with _args_lock:
        _collective_args = dict(args)


def get_collective_args() -> Optional[Dict[str, Any]]:
    """The ``xgboost.collective`` arguments the backend gave this worker (None outside
    an XGBoostTrainer's worker)."""
    with _args_lock:
        return dict(_collective_args) if _collective_args is not None else None


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

    with collective.CommunicatorContext(**args):
        return _call_train_func(train_func, config)
