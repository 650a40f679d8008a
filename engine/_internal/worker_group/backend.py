"""The Backend interface each framework implements (torch process group, TF_CONFIG …)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, List, Optional, Tuple

if TYPE_CHECKING:
    from engine._internal.worker_group.group import WorkerGroup


class BackendConfig:
    """Framework settings; ``backend_cls`` names the Backend that applies them."""

    #: Whether the workers may serve another fit or trial after this backend's run
    #: (``engine.reuse_workers()``, ``TuneConfig(reuse_actors=True)``): the worker reset
    #: (``engine._internal.worker_group.reset``) undoes all its backend sets up. Read from the
    #: class itself, not inherited: a subclass says so for itself.
    REUSABLE_WORKERS: ClassVar[bool] = True

    @property
    def backend_cls(self) -> type:
        return Backend

    def train_func_wrapper(self) -> Optional[Callable[[], None]]:
        """A function each worker runs in its train thread before ``train_func``."""
        return None

    @property
    def stall_timeout_s(self) -> Optional[float]:
        """Seconds with no report from any rank after which the controller declares the
        group hung (a collective that one rank never entered), names where every rank
        was, and fails the attempt. For frameworks whose collectives have no timeout of
        their own (TensorFlow, XGBoost); None disables the watchdog."""
        return None


class Backend:
    """Lifecycle hooks around a worker group; every hook is a no-op by default."""

    def on_start(self, worker_group: "WorkerGroup", backend_config: Any) -> None:
        """After the workers started, before training (e.g. set up a process group)."""

    def on_training_start(self, worker_group: "WorkerGroup", backend_config: Any) -> None:
        """Right before ``train_func`` starts on the workers."""

    def on_shutdown(self, worker_group: "WorkerGroup", backend_config: Any) -> None:
        """Before the workers are stopped (best effort: a dead group skips it)."""


_PORT_ATTEMPTS = 5


def distinct_free_ports(worker_group: "WorkerGroup", framework: str,
                        draw: Optional[Callable[[], Tuple[str, int]]] = None
                        ) -> List[Tuple[str, int]]:
    """``(node address, port)`` for each worker, drawn on its own node, no two alike
    (two workers of one node could draw the same port). ``draw`` runs on each worker
    instead of drawing a free port, when a worker may keep a port it serves on."""
    import ray

    from engine.exceptions import WorkerGroupStartupError

    for _ in range(_PORT_ATTEMPTS):
        addresses = ray.get([a.execute.remote(draw) if draw is not None
                             else a.free_port.remote() for a in worker_group.actors])
        if len(set(addresses)) == len(addresses):
            return addresses
    raise WorkerGroupStartupError(f"Could not find distinct free ports for the {framework} "
                                  "workers; retry, or free ports on the nodes.")
