"""Whether a trial can start now: the cluster's resources, less what the running trials
and the pool's idle worker groups hold; idle pooled groups are evicted to make room."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from engine._internal.run_state.spec import RunSpec
from engine._internal.worker_group.pool import WorkerGroupPool, group_key


class TrialCapacity:
    """The cluster's resources (``total``, read when the loop starts) and the check of
    a trial against them."""

    def __init__(self, pool: Optional[WorkerGroupPool]) -> None:
        self.pool = pool
        self.total: Dict[str, float] = {}

    def fits(self, run: Any, spec: RunSpec, running: List[Any]) -> bool:
        """Whether the trial can start now without waiting for resources. Idle pooled
        groups are evicted to make room; with nothing running a trial always starts
        (the worker group explains what the cluster lacks). A pooled group that fits the
        trial is assigned to it (``run.assigned_group``)."""
        key = group_key(spec.scaling_config, spec.worker_env)
        if self.pool is not None and self.pool.has(key):
            run.assigned_group = self.pool.take(key)
            if run.assigned_group is not None:
                return True
        need = spec.scaling_config.total_resources
        spare = 1.0 if spec.datasets or any(r.spec and r.spec.datasets
                                            for r in running) else 0.0
        while True:
            used = self.used(running)
            if all(used.get(k, 0.0) + v <= self.total.get(k, 0.0)
                   - (spare if k == "CPU" else 0.0) + 1e-9 for k, v in need.items()):
                return True
            if self.pool is None or not self.pool.evict_one():
                return not running

    def used(self, running: List[Any]) -> Dict[str, float]:
        """What the running trials and the pool's idle groups hold."""
        used = dict(self.pool.reserved()) if self.pool is not None else {}
        for r in running:
            assert r.spec is not None
            for k, v in r.spec.scaling_config.total_resources.items():
                used[k] = used.get(k, 0.0) + v
        return used
