"""HorovodConfig and the backend that gives each worker Horovod's Gloo environment.

The driver runs Horovod's HTTP rendezvous server (the key-value store Gloo's ranks meet
through); every worker gets the ``HOROVOD_*`` variables that ``horovodrun --gloo`` or
Horovod's own Ray executor would set, so ``hvd.init()`` in ``train_func`` just works.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Optional, Sequence

from engine._internal.worker_group.backend import Backend, BackendConfig
from engine.exceptions import ConfigError, WorkerGroupStartupError

if TYPE_CHECKING:
    from engine._internal.worker_group.group import WorkerGroup
    from engine.horovod._rendezvous import RendezvousServer

logger = logging.getLogger("engine")

HOROVOD_VERSION = "0.28.1"
INSTALL_COMMAND = "bash scripts/install_horovod.sh .venv/bin/python"
INSTALL_HINT = (
    f"Horovod {HOROVOD_VERSION} (with PyTorch and Gloo) is not installed. It is not on the "
    "'all' extra because the PyPI sdist must be patched to build against torch >= 2.1. "
    f"Install it from the trainyard checkout with: {INSTALL_COMMAND} (`make test` runs it; "
    "pass another interpreter's path instead of .venv/bin/python to install it there). "
    "The script builds the wheel once (about 6 minutes on 2 cores) and caches it."
)


def horovod_installed() -> bool:
    """Whether ``horovod`` is importable here (without importing it)."""
    return importlib.util.find_spec("horovod") is not None


def require_horovod() -> None:
    """Raise ``ImportError`` with the install command when horovod is missing."""
    if not horovod_installed():
        raise ImportError(INSTALL_HINT)


@dataclass
class HorovodConfig(BackendConfig):
    """How Horovod is set up on the workers (Gloo controller and CPU operations).

    Args:
        nics: Network interfaces Gloo may use (e.g. ``{"eth0"}``); Horovod's Gloo uses
            one, the first in sorted order, and NCCL gets them all
            (``NCCL_SOCKET_IFNAME``). Default: on each worker, the interface that holds
            the address Ray knows its node by.
        timeout_s: Seconds Gloo waits at rendezvous and in a collective before it fails
            (``HOROVOD_GLOO_TIMEOUT_SECONDS``).
        verbose: 0 is quiet; 1 or more logs the rendezvous server's requests.
    """

    REUSABLE_WORKERS: ClassVar[bool] = True  # worker_group.reset undoes its set-up

    nics: Optional[Sequence[str]] = None
    timeout_s: int = 300
    verbose: int = 0

    def __post_init__(self) -> None:
        if self.nics is not None:
            if isinstance(self.nics, str) or not all(
                    isinstance(n, str) and n.strip() for n in self.nics) or not self.nics:
                raise ConfigError(
                    f"HorovodConfig(nics={self.nics!r}) must be a non-empty set of interface "
                    "names, e.g. nics={'eth0'}, or None to detect them."
                )
            self.nics = sorted(set(self.nics))
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) \
                or self.timeout_s <= 0:
            raise ConfigError(f"HorovodConfig(timeout_s={self.timeout_s!r}) must be a "
                              "number of seconds > 0.")
        if isinstance(self.verbose, bool) or not isinstance(self.verbose, int) \
                or self.verbose < 0:
            raise ConfigError(f"HorovodConfig(verbose={self.verbose!r}) must be an int >= 0.")

    @property
    def backend_cls(self) -> type:
        return HorovodBackend


@dataclass
class Slot:
    """One worker's place in Horovod's topology (what ``hvd.rank()`` & co. return)."""

    hostname: str
    rank: int
    local_rank: int
    cross_rank: int
    size: int
    local_size: int
    cross_size: int


def plan_slots(node_ids: List[str]) -> List[Slot]:
    """Horovod ranks for workers in world-rank order, given each one's node.

    Local ranks count the workers of a node; the cross rank of a worker is the index of
    its node among the nodes that have a worker with the same local rank.
    """
    local_rank: List[int] = []
    per_node: Dict[str, int] = {}
    for node in node_ids:
        local_rank.append(per_node.get(node, 0))
        per_node[node] = local_rank[-1] + 1
    cross_rank: List[int] = []
    cross_size: Dict[int, int] = {}
    for lr in local_rank:
        cross_rank.append(cross_size.get(lr, 0))
        cross_size[lr] = cross_rank[-1] + 1
    return [Slot(hostname=node, rank=rank, local_rank=local_rank[rank],
                 cross_rank=cross_rank[rank], size=len(node_ids),
                 local_size=per_node[node], cross_size=cross_size[local_rank[rank]])
            for rank, node in enumerate(node_ids)]


def slot_env(slot: Slot) -> Dict[str, str]:
    return {
        "HOROVOD_HOSTNAME": slot.hostname,
        "HOROVOD_RANK": str(slot.rank),
        "HOROVOD_SIZE": str(slot.size),
        "HOROVOD_LOCAL_RANK": str(slot.local_rank),
        "HOROVOD_LOCAL_SIZE": str(slot.local_size),
        "HOROVOD_CROSS_RANK": str(slot.cross_rank),
        "HOROVOD_CROSS_SIZE": str(slot.cross_size),
    }


def _setup_worker(env: Dict[str, str], node_ip: str) -> Optional[str]:
    """Runs on each worker: sets Horovod's environment and returns the Gloo interface
    ("" when Gloo resolves the hostname itself), or None when horovod is missing."""
    if importlib.util.find_spec("horovod") is None:
        return None
    if "HOROVOD_GLOO_IFACE" not in env:
        iface = _interface_of(node_ip)
        if iface:
            env = dict(env, HOROVOD_GLOO_IFACE=iface)
    os.environ.update(env)
    return env.get("HOROVOD_GLOO_IFACE", "")


def _interface_of(ip: str) -> Optional[str]:
    """The network interface holding ``ip`` (None when no local one does)."""
    try:
        import psutil
    except ImportError:  # a horovod dependency; without it Gloo resolves the hostname
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == ip for a in addrs):
            return name
    return None


class HorovodBackend(Backend):
    """Starts the rendezvous server per attempt and stops it when the group stops."""

    def __init__(self) -> None:
        self.server: Optional["RendezvousServer"] = None

    def on_start(self, worker_group: "WorkerGroup", backend_config: HorovodConfig) -> None:
        import ray

        from engine._internal.worker_group.worker import _node_ip
        from engine.horovod._rendezvous import RendezvousServer

        slots = plan_slots([m.node_id for m in worker_group.meta])
        self.on_shutdown(worker_group, backend_config)  # a previous attempt's, if any
        self.server = RendezvousServer(_node_ip(), slots, verbose=backend_config.verbose)
        common = {
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": self.server.address,
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(self.server.port),
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_GLOO_TIMEOUT_SECONDS": str(int(backend_config.timeout_s)),
        }
        if backend_config.nics:
            common["HOROVOD_GLOO_IFACE"] = backend_config.nics[0]
            common["NCCL_SOCKET_IFNAME"] = ",".join(backend_config.nics)
        cuda = _cuda_visible_devices(worker_group)
        refs = []
        for rank, (actor, meta) in enumerate(zip(worker_group.actors, worker_group.meta)):
            env = dict(common, **slot_env(slots[rank]))
            if cuda[rank] is not None:
                env["CUDA_VISIBLE_DEVICES"] = cuda[rank]
            refs.append(actor.execute.remote(_setup_worker, env, meta.node_ip))
        ifaces = ray.get(refs)
        missing = [rank for rank, iface in enumerate(ifaces) if iface is None]
        if missing:
            raise WorkerGroupStartupError(
                f"Workers {missing} cannot import horovod (their Python environment lacks "
                f"it). {INSTALL_HINT}")
        logger.debug("Horovod rendezvous at %s:%d; Gloo interfaces %s", self.server.address,
                     self.server.port, ifaces)

    def on_shutdown(self, worker_group: "WorkerGroup", backend_config: Any) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.stop()


def _cuda_visible_devices(worker_group: "WorkerGroup") -> List[Optional[str]]:
    """Each worker sees all GPUs of its node, listed in local-rank order, so that the
    usual ``torch.cuda.set_device(hvd.local_rank())`` picks the worker's own GPU."""
    per_node: Dict[str, List[str]] = {}
    for meta in sorted(worker_group.meta, key=lambda m: m.local_rank):
        ids = per_node.setdefault(meta.node_id, [])
        ids.extend(g for g in meta.gpu_ids if g not in ids)
    return [",".join(per_node[m.node_id]) or None for m in worker_group.meta]
