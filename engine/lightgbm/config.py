"""LightGBMConfig and the backend that wires the workers into LightGBM's socket network.

Per attempt, each worker picks a free port on its node; every worker then gets the
whole ``machines`` list (``ip:port,…`` in rank order), its own ``local_listen_port`` and
``num_machines``. LightGBM opens the network when the booster is created, and each
``lgb.train`` round syncs histograms across it (``tree_learner="data"``).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from engine._internal.backend import Backend, BackendConfig
from engine.exceptions import ConfigError, WorkerGroupStartupError

if TYPE_CHECKING:
    from engine._internal.worker_group import WorkerGroup

_INSTALL_HINT = "engine.lightgbm needs LightGBM: pip install 'trainyard[lightgbm]'"
_PORT_ATTEMPTS = 5


def import_lightgbm() -> Any:
    """``import lightgbm`` with an install hint when it is missing."""
    try:
        import lightgbm
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return lightgbm


@dataclass
class LightGBMConfig(BackendConfig):
    """How the workers' LightGBM network is set up.

    Args:
        timeout_s: How long a worker waits on its peers' sockets before it fails the
            run (LightGBM's ``time_out``, rounded up to whole minutes). A worker that
            dies is noticed at once anyway.
    """

    timeout_s: int = 1800

    def __post_init__(self) -> None:
        if not isinstance(self.timeout_s, int) or isinstance(self.timeout_s, bool) \
                or self.timeout_s <= 0:
            raise ConfigError(f"LightGBMConfig(timeout_s={self.timeout_s!r}) must be an "
                              "integer > 0 (seconds).")

    @property
    def backend_cls(self) -> type:
        return LightGBMBackend


class LightGBMBackend(Backend):
    """Gives every worker the network parameters of this attempt."""

    def on_start(self, worker_group: "WorkerGroup", backend_config: LightGBMConfig) -> None:
        import ray

        n = len(worker_group)
        if n == 1:
            ray.get(worker_group.actors[0].execute.remote(_set_network_params, {}))
            return
        addresses = _distinct_ports(worker_group)
        machines = ",".join(f"{ip}:{port}" for ip, port in addresses)
        minutes = max(1, math.ceil(backend_config.timeout_s / 60))
        ray.get([actor.execute.remote(_set_network_params, {
            "machines": machines, "local_listen_port": port, "num_machines": n,
            "time_out": minutes}) for actor, (_, port) in zip(worker_group.actors, addresses)])


def _distinct_ports(worker_group: "WorkerGroup") -> List[Tuple[str, int]]:
    """One free port per worker, no two alike on one node (the OS may hand a port just
    released by one worker to the next)."""
    import ray

    for _ in range(_PORT_ATTEMPTS):
        addresses = ray.get([a.free_port.remote() for a in worker_group.actors])
        if len(set(addresses)) == len(addresses):
            return addresses
    raise WorkerGroupStartupError("Could not find distinct free ports for the LightGBM "
                                  "workers; retry, or free ports on the nodes.")


# --- worker side -------------------------------------------------------------------------
_network_params: Optional[Dict[str, Any]] = None
_params_lock = threading.Lock()


def _set_network_params(params: Dict[str, Any]) -> None:
    global _network_params
    with _params_lock:
        _network_params = dict(params)


def get_network_params() -> Dict[str, Any]:
    """LightGBM parameters that make this worker part of the run's network: merge them
    into your ``params`` in a ``LightGBMTrainer(train_loop_per_worker=f)`` function.

    Returns ``machines``, ``local_listen_port``, ``num_machines`` and ``time_out``, plus
    ``tree_learner="data"`` and ``pre_partition=True`` (each worker holds its own rows);
    an empty dict with one worker.

    Raises:
        RuntimeError: called outside a LightGBMTrainer's worker.
    """
    with _params_lock:
        params = dict(_network_params) if _network_params is not None else None
    if params is None:
        raise RuntimeError("get_network_params() is only known inside a LightGBMTrainer's "
                           "training function (its backend sets it up on each worker).")
    if params:
        params.update(tree_learner="data", pre_partition=True)
    return params
