"""LightGBMConfig and the backend that wires the workers into LightGBM's socket network.

Per attempt, each worker picks a free port on its node; every worker then gets the
whole ``machines`` list (``ip:port,…`` in rank order), its own ``local_listen_port`` and
``num_machines``. LightGBM opens the network when the booster is created, and each
``lgb.train`` round syncs histograms across it (``tree_learner="data"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Dict

from engine._internal.gbdt.config import (GBDTConfig, get_worker_params, import_framework,
                                          set_worker_params)
from engine._internal.worker_group.backend import Backend, distinct_free_ports

if TYPE_CHECKING:
    from engine._internal.worker_group.group import WorkerGroup

_INSTALL_HINT = "engine.lightgbm needs LightGBM: pip install 'trainyard[lightgbm]'"


def import_lightgbm() -> Any:
    """``import lightgbm`` with an install hint when it is missing."""
    return import_framework("lightgbm", _INSTALL_HINT)


class LightGBMBackend(Backend):
    """Gives every worker the network parameters of this attempt."""

    def on_start(self, worker_group: "WorkerGroup", backend_config: LightGBMConfig) -> None:
        import ray

        n = len(worker_group)
        if n == 1:
            ray.get(worker_group.actors[0].execute.remote(set_worker_params, "lightgbm", {}))
            return
        addresses = distinct_free_ports(worker_group, "LightGBM")
        machines = ",".join(f"{ip}:{port}" for ip, port in addresses)
        minutes = max(1, math.ceil(backend_config.timeout_s / 60))
        ray.get([actor.execute.remote(set_worker_params, "lightgbm", {
            "machines": machines, "local_listen_port": port, "num_machines": n,
            "time_out": minutes}) for actor, (_, port) in zip(worker_group.actors, addresses)])


@dataclass
class LightGBMConfig(GBDTConfig):
    """How the workers' LightGBM network is set up.

    Args:
        timeout_s: How long a worker waits on its peers' sockets before it fails the
            run (LightGBM's ``time_out``, rounded up to whole minutes). A worker that
            dies is noticed at once anyway.

    Raises:
        ConfigError: ``timeout_s`` is not an integer > 0.
    """

    _backend = LightGBMBackend
    REUSABLE_WORKERS: ClassVar[bool] = True  # worker_group.reset frees the network


# --- worker side -------------------------------------------------------------------------
def get_network_params() -> Dict[str, Any]:
    """LightGBM parameters that make this worker part of the run's network: merge them
    into your ``params`` in a ``LightGBMTrainer(train_loop_per_worker=f)`` function.

    Returns ``machines``, ``local_listen_port``, ``num_machines`` and ``time_out``, plus
    ``tree_learner="data"`` and ``pre_partition=True`` (each worker holds its own rows);
    an empty dict with one worker.

    Raises:
        RuntimeError: called outside a LightGBMTrainer's worker.
    """
    params = get_worker_params("lightgbm")
    if params is None:
        raise RuntimeError("get_network_params() is only known inside a LightGBMTrainer's "
                           "training function (its backend sets it up on each worker).")
    if params:
        params.update(tree_learner="data", pre_partition=True)
    return params
