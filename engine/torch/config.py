"""TorchConfig and the backend that sets up torch.distributed on the workers."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Optional, Union

from engine import constants
from engine._internal.worker_group.backend import Backend, BackendConfig
from engine.exceptions import ConfigError

if TYPE_CHECKING:
    from engine._internal.worker_group.group import WorkerGroup

# The least time the ranks get to join the process group (see TorchConfig).
DEFAULT_RENDEZVOUS_TIMEOUT_S = 300


@dataclass
class TorchConfig(BackendConfig):
    """How the torch process group is set up.

    Args:
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (GPU). Defaults to nccl with
            ``use_gpu=True``, else gloo.
        init_method: ``"tcp"`` or ``"env"`` (Ray Train's spellings): either way the
            ranks meet at rank 0's store, and ``MASTER_ADDR``/``MASTER_PORT`` are set.
        timeout_s: Seconds a collective may wait before it fails the run.
        rendezvous_timeout_s: Seconds the workers may take to join the process group
            (rank 0 hosts the rendezvous, so it counts from rank 0's start and covers
            the other ranks' imports). Defaults to the larger of ``timeout_s`` and
            300 s, so that a short collective timeout does not fail a slow start.
    """

    REUSABLE_WORKERS: ClassVar[bool] = True  # worker_group.reset undoes its set-up

    backend: Optional[str] = None
    init_method: str = "tcp"
    timeout_s: int = 1800
    rendezvous_timeout_s: Optional[float] = None

    def __post_init__(self) -> None:
        if self.backend is not None and self.backend not in ("gloo", "nccl"):
            raise ConfigError(
                f"TorchConfig(backend={self.backend!r}) is unknown: use 'gloo' or 'nccl'."
            )
        if self.init_method not in ("tcp", "env"):
            raise ConfigError(
                f"TorchConfig(init_method={self.init_method!r}) is unknown: use 'tcp' or 'env'."
            )
        if not _positive(self.timeout_s):
            raise ConfigError(f"TorchConfig(timeout_s={self.timeout_s!r}) must be > 0.")
        if self.rendezvous_timeout_s is not None and not _positive(self.rendezvous_timeout_s):
            raise ConfigError(f"TorchConfig(rendezvous_timeout_s={self.rendezvous_timeout_s!r})"
                              " must be > 0, or None for the default.")

    @property
    def effective_rendezvous_timeout_s(self) -> float:
        if self.rendezvous_timeout_s is not None:
            return float(self.rendezvous_timeout_s)
        return float(max(self.timeout_s, DEFAULT_RENDEZVOUS_TIMEOUT_S))

    @property
    def backend_cls(self) -> type:
        return TorchBackend


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and value > 0


# Keys of the ranks' own barrier in the store (torch's process group prefixes its own).
_JOINED_KEY = "trainyard/joined"
_ALL_JOINED_KEY = "trainyard/all_joined"

# Rank 0's rendezvous store, held until the process group is destroyed (torch's process
# group holds it too); a worker the pool keeps for another trial drops it then.
_MASTER_STORE: Any = None


def release_store() -> None:
    """Drop rank 0's store (after the process group was destroyed): its port is freed,
    and a worker kept for the next trial opens a new one if it is rank 0 again."""
    global _MASTER_STORE
    _MASTER_STORE = None


def _start_master_store(master: str, world_size: int, rendezvous_timeout_s: float) -> int:
    """Runs on rank 0: opens the rendezvous store on a port the OS picks, and returns it.

    The store binds the port itself, so no other process can take it between choosing
    and binding (as it could a port found free and then closed)."""
    global _MASTER_STORE
    import torch.distributed as dist

    _MASTER_STORE = dist.TCPStore(master, 0, world_size, is_master=True,
                                  wait_for_workers=False,
                                  timeout=datetime.timedelta(seconds=rendezvous_timeout_s))
    return int(_MASTER_STORE.port)


def _setup_worker(backend: str, master: str, port: Union[int, List[Any]], rank: int,
                  world_size: int, local_rank: int, local_world_size: int, node_rank: int,
                  timeout_s: float, rendezvous_timeout_s: float) -> None:
    """Runs on each worker: environment, CUDA device, and the process group.

    ``port`` is rank 0's store port, or ``[ObjectRef]`` to it (in a list, so that Ray
    does not wait for it before the call, and the ranks import torch while rank 0
    opens the store). Rank 0 must have run ``_start_master_store`` in this process
    (and finished it: its port, an int, says so).

    All ranks wait for each other at the store (``_join``) before the process group is
    made: ``init_process_group`` would give that wait the collectives' timeout, and
    with a short ``timeout_s`` a rank still importing torch would fail the start."""
    import torch
    import torch.distributed as dist

    if not isinstance(port, int):
        port = _wait_for_port(port[0], master, rendezvous_timeout_s)
    os.environ.update(MASTER_ADDR=master, MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(local_rank),
                      LOCAL_WORLD_SIZE=str(local_world_size), NODE_RANK=str(node_rank))
    if backend == "nccl" and torch.cuda.is_available():
        torch.cuda.set_device(_device_index(local_rank))
    # "tcp" and "env" meet at the same place (rank 0's store at MASTER_ADDR:MASTER_PORT);
    # torch's env:// handler would build this very store.
    if rank == 0:
        store = _MASTER_STORE
    else:
        store = dist.TCPStore(master, port, world_size, is_master=False,
                              timeout=datetime.timedelta(seconds=rendezvous_timeout_s))
    _join(store, f"{master}:{port}", world_size, rendezvous_timeout_s)
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))


def _wait_for_port(port_ref: Any, master: str, rendezvous_timeout_s: float) -> int:
    import ray
    from ray.exceptions import GetTimeoutError

    try:
        return int(ray.get(port_ref, timeout=rendezvous_timeout_s))
    except GetTimeoutError:
        raise RuntimeError(
            f"torch rendezvous timed out: rank 0 (on {master}) did not open its store "
            f"within rendezvous_timeout_s={rendezvous_timeout_s:g}s (a slow or stuck "
            "import of torch there?); raise TorchConfig(rendezvous_timeout_s=...)."
        ) from None


def _join(store: Any, where: str, world_size: int, rendezvous_timeout_s: float) -> None:
    """Returns when every rank has reached the store; raises after the timeout."""
    if store.add(_JOINED_KEY, 1) == world_size:
        store.set(_ALL_JOINED_KEY, "1")
    try:
        store.wait([_ALL_JOINED_KEY], datetime.timedelta(seconds=rendezvous_timeout_s))
    except Exception as e:  # torch raises DistStoreError (a RuntimeError) on timeout
        joined = store.add(_JOINED_KEY, 0)
        raise RuntimeError(
            f"torch rendezvous timed out: {joined} of {world_size} ranks reached rank 0's "
            f"store at {where} within rendezvous_timeout_s={rendezvous_timeout_s:g}s; "
            "raise TorchConfig(rendezvous_timeout_s=...) if the ranks start slowly "
            f"({type(e).__name__}: {e})") from e


def _device_index(local_rank: int) -> int:
    own = constants.get(constants.OWN_GPU_INDEX_ENV_VAR)
    return own if own is not None else local_rank


class TorchBackend(Backend):
    def on_start(self, worker_group: "WorkerGroup", backend_config: TorchConfig) -> None:
        import ray

        use_gpu = worker_group.scaling.use_gpu
        backend = backend_config.backend or ("nccl" if use_gpu else "gloo")
        cuda = _cuda_visible_devices(worker_group) if use_gpu else [None] * len(worker_group)
        # Before any torch import on the workers (rank 0's store imports it).
        ray.get([actor.set_env.remote(_gpu_env(cuda[rank], meta.gpu_ids))
                 for rank, (actor, meta) in enumerate(zip(worker_group.actors,
                                                          worker_group.meta))
                 if cuda[rank] is not None])
        master = worker_group.meta[0].node_ip
        rendezvous_s = backend_config.effective_rendezvous_timeout_s
        port_ref = worker_group.actors[0].execute.remote(
            _start_master_store, master, len(worker_group), rendezvous_s)
        # Rank 0's call waits for its store (a top-level ref: its actor runs calls in
        # threads, and two threads importing torch at once break its import); the
        # others' get the ref in a list and import torch meanwhile.
        refs = [actor.execute.remote(
                    _setup_worker, backend, master, port_ref if rank == 0 else [port_ref],
                    rank, len(worker_group),
                    meta.local_rank, meta.local_world_size, meta.node_rank,
                    backend_config.timeout_s, rendezvous_s)
                for rank, (actor, meta) in enumerate(zip(worker_group.actors,
                                                         worker_group.meta))]
        ray.get([port_ref, *refs])

    # No on_shutdown: the worker processes are stopped, which frees the process group;
    # a polite destroy would hang on a rank stuck in a collective.


def _gpu_env(visible: str, own_ids: List[str]) -> Dict[str, str]:
    """A GPU worker sees its node's GPUs; it uses its own (index into the visible ones)."""
    own = own_ids[0] if own_ids else "0"
    return {"CUDA_VISIBLE_DEVICES": visible,
            constants.OWN_GPU_INDEX_ENV_VAR: str(visible.split(",").index(own))}


def _cuda_visible_devices(worker_group: "WorkerGroup") -> List[Optional[str]]:
    """All GPUs of a node are visible to each of its workers (so NCCL can use P2P)."""
    per_node: Dict[str, List[str]] = {}
    for meta in worker_group.meta:
        ids = per_node.setdefault(meta.node_id, [])
        for gid in meta.gpu_ids:
            if gid not in ids:
                ids.append(gid)
    return [",".join(per_node[m.node_id]) or None for m in worker_group.meta]
