"""Reusing worker actors across trials (``TuneConfig(reuse_actors=True)``) and, inside
``engine.reuse_workers()``, across the fits and tunes of one process.

A trial or fit whose workers all finished hands its group to the pool instead of killing
it, once every worker undid what the run left in its process (``worker_group.reset``: the
framework's collective, its environment, the user's modules); the next trial or
fit with the same shape (resources, worker count, env) starts on it, skipping the
placement group and the process start. Idle groups still hold their placement group, so
the trial loop counts them as used and evicts them when a trial of another shape needs
room, and a fit that takes one stops the other idle groups first (its datasets' readers
need the CPUs they hold).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from engine._internal.run_state import timeline
from engine._internal.worker_group.group import WorkerGroup
from engine.config import ScalingConfig

logger = logging.getLogger("engine")

Key = Tuple[Any, ...]


def group_key(scaling: ScalingConfig, env: Dict[str, str]) -> Key:
    return (scaling.num_workers, tuple(sorted(scaling.worker_resources.items())),
            scaling.placement_strategy, tuple(sorted(env.items())))


class WorkerGroupPool:
    def __init__(self) -> None:
        self._idle: Dict[Key, List[WorkerGroup]] = {}
        self._lock = threading.Lock()
        self.closed = False
        self.reused = 0

    def factory(self, assigned: Optional[WorkerGroup] = None, exclusive: bool = False
                ) -> Callable[..., WorkerGroup]:
        """The ``worker_group_cls`` to give a controller; its first group starts on
        ``assigned`` (an idle group the trial loop took for it) when given. With
        ``exclusive`` (a fit, which no trial loop makes room for), every other idle group
        is stopped before the group starts."""
        pool = self
        first = [assigned] if assigned is not None else []

        def make(scaling: ScalingConfig, env: Optional[Dict[str, str]] = None,
                 needs_data_cpus: bool = False) -> WorkerGroup:
            return _PooledWorkerGroup(pool, scaling, env, needs_data_cpus,
                                      first.pop() if first else None, exclusive)

        return make

    def has(self, key: Key) -> bool:
        with self._lock:
            return bool(self._idle.get(key))

    def take(self, key: Key) -> Optional[WorkerGroup]:
        with self._lock:
            groups = self._idle.get(key)
            return groups.pop() if groups else None

    def give(self, key: Key, group: WorkerGroup) -> bool:
        with self._lock:
            if self.closed:
                return False
            self._idle.setdefault(key, []).append(group)
            return True

    def reserved(self) -> Dict[str, float]:
        """Resources the idle groups hold."""
        total: Dict[str, float] = {}
        with self._lock:
            for groups in self._idle.values():
                for group in groups:
                    for k, v in group.scaling.total_resources.items():
                        total[k] = total.get(k, 0.0) + v
        return total

    def evict_one(self) -> bool:
        """Stop one idle group (releasing its placement group); False if none is idle."""
        with self._lock:
            victim = None
            for groups in self._idle.values():
                if groups:
                    victim = groups.pop(0)
                    break
        if victim is None:
            return False
        victim.shutdown(graceful=True)  # idle: it exits cleanly, no SIGTERM noise
        return True

    def evict_all(self) -> int:
        """Stop every idle group; the number stopped."""
        stopped = 0
        while self.evict_one():
            stopped += 1
        return stopped

    def close(self) -> None:
        with self._lock:
            self.closed = True
            groups = [g for gs in self._idle.values() for g in gs]
            self._idle.clear()
        for group in groups:
            group.shutdown(graceful=True)


class _PooledWorkerGroup(WorkerGroup):
    """A worker group that starts on an idle pooled group when one fits, and goes back
    to the pool when training ended cleanly."""

    def __init__(self, pool: WorkerGroupPool, scaling: ScalingConfig,
                 env: Optional[Dict[str, str]] = None, needs_data_cpus: bool = False,
                 assigned: Optional[WorkerGroup] = None, exclusive: bool = False) -> None:
        super().__init__(scaling, env, needs_data_cpus)
        self._pool = pool
        self._key = group_key(scaling, self.env)
        self._assigned = assigned
        self._exclusive = exclusive

    def start(self) -> None:
        idle, self._assigned = self._assigned or self._pool.take(self._key), None
        if self._exclusive:
            self._pool.evict_all()
        if idle is not None and _alive(idle):
            self.actors, self.meta = idle.actors, idle.meta
            self.placement_group = idle.placement_group
            self._pool.reused += 1
            # The run record's timeline has the same steps either way (Ray is up and
            # the workers are ready), a reused group's only a moment apart.
            timeline.mark("ray_started")
            timeline.mark("workers_started")
            return
        if idle is not None:
            idle.shutdown()
        super().start()

    def shutdown(self, graceful: bool = False) -> None:
        if graceful and self.actors and not self._pool.closed and _reset(self):
            holder = WorkerGroup(self.scaling, self.env, self.needs_data_cpus)
            holder.actors, holder.meta = self.actors, self.meta
            holder.placement_group = self.placement_group
            if self._pool.give(self._key, holder):
                self.actors, self.meta, self.placement_group = [], [], None
                self._poll_refs = {}
                return
        super().shutdown(graceful)


def reset_worker() -> bool:
    """Runs on a worker before its process serves another trial or fit: no framework
    state may outlive the trial (``engine._internal.worker_group.reset``); True when clean."""
    from engine._internal.worker_group.reset import reset_process

    return reset_process() is None


def _reset(group: WorkerGroup) -> bool:
    import ray

    try:
        return all(why is None for why in
                   ray.get([a.reset.remote() for a in group.actors], timeout=60))
    except Exception:  # a worker that cannot be reset is stopped instead
        return False


def _alive(group: WorkerGroup) -> bool:
    import ray

    try:
        ray.get([a.node_info.remote() for a in group.actors], timeout=30)
        return True
    except Exception:  # died while idle: start a fresh group instead
        logger.info("An idle pooled worker group died; starting a new one.")
        return False


def resettable(backend_config: Any) -> bool:
    """Whether worker processes can serve another trial or fit after this backend set
    them up: the engine's own backends (every trainer's but RLlib's) declare
    ``REUSABLE_WORKERS``, as the reset undoes all they set up; a subclass (a user's
    backend) does not inherit it, since it may set up state the reset does not know."""
    return bool(vars(type(backend_config)).get("REUSABLE_WORKERS", False))


# --- one pool for a whole block of fits and tunes: engine.reuse_workers() --------------
_shared: Optional[WorkerGroupPool] = None
_shared_depth = 0
_shared_lock = threading.Lock()


def shared_pool() -> Optional[WorkerGroupPool]:
    """The pool of the innermost open ``reuse_workers()`` block, if any (any thread)."""
    return _shared


@contextlib.contextmanager
def reuse_workers() -> Iterator[WorkerGroupPool]:
    """Keep finished worker groups for the fits and tunes that follow, in this process.

        with engine.reuse_workers():
            best = Tuner(trainer, param_space=...).fit().get_best_result()
            TorchTrainer(..., train_loop_config=best.config).fit()  # the tune's workers

    Inside the block a worker group whose training finished cleanly is kept (idle,
    holding its resources) instead of stopped, and the next ``fit()`` or Tuner trial of
    the same shape (workers, resources per worker, worker env) starts on its processes:
    no placement group, process start or framework import again. Every trainer's
    workers qualify but RLlib's (and those of a user's own ``BackendConfig`` subclass):
    in between, each worker tears down the framework's collective (torch's process
    group, ``hvd.shutdown()``, XGBoost's tracker and communicator, LightGBM's network),
    resets framework state (Keras' session, Accelerate's, the RNGs), drops the user's
    modules imported during the fit (the next fit imports them afresh) and gets back
    the environment variables and working directory it started with. TensorFlow cannot
    stop its collective server in-process: a group that ran MultiWorkerMirroredStrategy
    keeps its ports, so the next TensorFlow fit on it gets the same ``TF_CONFIG`` and
    reuses the server; a worker whose server serves another cluster (a strategy given
    its own resolver) is not reusable. A worker whose reset fails, or finds it not
    clean, is stopped instead of kept.

    A ``fit()`` that takes an idle group stops the other idle ones first, and leaving
    the outermost block stops all of them, so keep the block around the steps that
    train (not around batch prediction, whose actors need those CPUs). Blocks nest
    (the outermost one owns the pool) and hold across threads (e.g. Prefect tasks).
    Runs on a Ray cluster of their own (Ray Jobs) are not affected.
    """
    global _shared, _shared_depth
    with _shared_lock:
        if _shared is None:
            _shared = WorkerGroupPool()
        _shared_depth += 1
        pool = _shared
    try:
        yield pool
    finally:
        with _shared_lock:
            _shared_depth -= 1
            last = _shared_depth == 0
            if last:
                _shared = None
        if last:
            pool.close()
