"""TorchConfig and the backend that sets up torch.distributed on the workers."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional

from engine import constants
from engine._internal.backend import Backend, BackendConfig
from engine.exceptions import ConfigError

if TYPE_CHECKING:
    from engine._internal.worker_group import WorkerGroup

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


def _setup_worker(backend: str, init_method: str, master: str, port: int, rank: int,
                  world_size: int, local_rank: int, local_world_size: int, node_rank: int,
                  timeout_s: float, rendezvous_timeout_s: float,
                  cuda_devices: Optional[str]) -> None:
    """Runs on each worker: environment, CUDA device, and the process group.

    The rendezvous store is made here rather than by ``init_method``'s handler, which
    would give it the collectives' timeout: with a short ``timeout_s`` a rank that
    connects while rank 0 still imports torch would fail the start."""
    os.environ.update(MASTER_ADDR=master, MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(local_rank),
                      LOCAL_WORLD_SIZE=str(local_world_size), NODE_RANK=str(node_rank))
    if cuda_devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = cuda_devices
    import torch
    import torch.distributed as dist

    if backend == "nccl" and torch.cuda.is_available():
        torch.cuda.set_device(_device_index(local_rank))
    # "tcp" and "env" meet at the same place (rank 0's store at MASTER_ADDR:MASTER_PORT,
    # both set above); torch's env:// handler would build this very store.
    store = dist.TCPStore(master, port, world_size, is_master=rank == 0,
                          timeout=datetime.timedelta(seconds=rendezvous_timeout_s))
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))


def _device_index(local_rank: int) -> int:
    own = os.environ.get(constants.OWN_GPU_INDEX_ENV_VAR)
    return int(own) if own is not None else local_rank


class TorchBackend(Backend):
    def on_start(self, worker_group: "WorkerGroup", backend_config: TorchConfig) -> None:
        import ray

        use_gpu = worker_group.scaling.use_gpu
        backend = backend_config.backend or ("nccl" if use_gpu else "gloo")
        master, port = ray.get(worker_group.actors[0].free_port.remote())
        cuda = _cuda_visible_devices(worker_group) if use_gpu else [None] * len(worker_group)
        refs = []
        for rank, (actor, meta) in enumerate(zip(worker_group.actors, worker_group.meta)):
            if cuda[rank] is not None:
                own = meta.gpu_ids[0] if meta.gpu_ids else "0"
                ray.get(actor.set_env.remote(
                    {constants.OWN_GPU_INDEX_ENV_VAR: str(cuda[rank].split(",").index(own))}))
            refs.append(actor.execute.remote(
                _setup_worker, backend, backend_config.init_method, master, port, rank,
                len(worker_group), meta.local_rank, meta.local_world_size, meta.node_rank,
                backend_config.timeout_s, backend_config.effective_rendezvous_timeout_s,
                cuda[rank]))
        ray.get(refs)

    # No on_shutdown: the worker processes are stopped, which frees the process group;
    # a polite destroy would hang on a rank stuck in a collective.


def _cuda_visible_devices(worker_group: "WorkerGroup") -> List[Optional[str]]:
    """All GPUs of a node are visible to each of its workers (so NCCL can use P2P)."""
    per_node: Dict[str, List[str]] = {}
    for meta in worker_group.meta:
        ids = per_node.setdefault(meta.node_id, [])
        for gid in meta.gpu_ids:
            if gid not in ids:
                ids.append(gid)
    return [",".join(per_node[m.node_id]) or None for m in worker_group.meta]
