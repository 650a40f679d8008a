"""Is the run's storage reachable from every worker node? Checked before training."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import List, Optional

from engine._internal.storage.filesystem import Storage, join
from engine.exceptions import StorageError


@dataclass
class ProbeResult:
    node_ip: str
    sees_driver_file: bool
    writable: bool
    error: str = ""


def probe_storage(storage: Storage, driver_probe: str, node_ip: str) -> ProbeResult:
    """Runs on a worker: can it read the driver's probe file and write its own?"""
    try:
        sees = storage.exists(driver_probe)
    except Exception as exc:  # noqa: BLE001 - reported back as text
        return ProbeResult(node_ip, False, False, type(exc).__name__)
    own = join(storage.root, f".probe_{uuid.uuid4().hex}")
    try:
        storage.write_bytes_atomic(own, b"worker")
        storage.fs.delete_file(own)
        return ProbeResult(node_ip, sees, True)
    except Exception as exc:  # noqa: BLE001
        return ProbeResult(node_ip, sees, False, f"{type(exc).__name__}: {exc}"[:200])


def verdict(storage: Storage, results: List[ProbeResult]) -> Optional[str]:
    """The error message for probe results that show unusable storage, else None."""
    for res in results:
        if not res.sees_driver_file and storage.local:
            return (
                f"storage_path {storage.display()!r} is a local path that worker node "
                f"{res.node_ip} does not share with the driver: checkpoints written there "
                "would be lost. Use storage every node sees: a shared filesystem (NFS) "
                "mount, or s3://bucket/prefix."
            )
        if not res.sees_driver_file or not res.writable:
            return (
                f"Worker node {res.node_ip} cannot use storage {storage.display()!r} "
                f"({res.error or 'the driver’s files are not visible there'}). Give every "
                "node access to it (credentials, network, mount) or choose another "
                "RunConfig(storage_path=...)."
            )
    return None


def check_from_workers(storage: Storage, worker_group) -> None:
    """Probe storage once from each node that runs workers but not the driver."""
    import ray

    driver_node = ray.get_runtime_context().get_node_id()
    firsts = {}
    for actor, meta in zip(worker_group.actors, worker_group.meta):
        if meta.node_id != driver_node:
            firsts.setdefault(meta.node_id, (actor, meta))
    if not firsts:
        return
    probe = join(storage.root, f".probe_{uuid.uuid4().hex}")
    storage.write_bytes_atomic(probe, b"driver")
    try:
        results = ray.get([actor.execute.remote(probe_storage, storage, probe, meta.node_ip)
                           for actor, meta in firsts.values()])
    finally:
        storage.fs.delete_file(probe)
    message = verdict(storage, results)
    if message:
        raise StorageError(message)
