"""N worker actors gang-scheduled in one placement group."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from engine import constants
from engine._internal.data.plan import FRACTIONAL, STREAM, DataPlan, plan_data
from engine._internal.execution.failure_diagnosis import worker_died
from engine.config import ScalingConfig
from engine.exceptions import WorkerDiedError, WorkerError, WorkerGroupStartupError

logger = logging.getLogger(__name__)


@dataclass
class PollResult:
    """What one rank said in one poll: new reports, whether it ended, and how."""

    rank: int
    items: List[Any]
    finished: bool = False
    # Typed: UserCodeError or CollectiveTimeoutError (train_func raised),
    # WorkerDiedError (the process is gone).
    error: Optional[WorkerError] = None

    @property
    def died(self) -> bool:
        return isinstance(self.error, WorkerDiedError)


@dataclass
class WorkerMeta:
    node_id: str
    node_ip: str
    hostname: str
    pid: int
    gpu_ids: List[str]
    world_rank: int = 0
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0


def _child_bundles(scaling: ScalingConfig) -> List[Dict[str, float]]:
    """Extra bundles a ScalingConfig subclass asks for (``child_bundles``), if any."""
    return [dict(b) for b in getattr(scaling, "child_bundles", None) or []]


def _sum_bundles(bundles: List[Dict[str, float]]) -> Dict[str, float]:
    total: Dict[str, float] = {}
    for bundle in bundles:
        for key, value in bundle.items():
            total[key] = total.get(key, 0.0) + float(value)
    return total


class WorkerGroup:
    """Starts, addresses and stops the training actors of one attempt."""

    def __init__(self, scaling: ScalingConfig, env: Dict[str, str] | None = None,
                 needs_data_cpus: bool = False) -> None:
        self.scaling = scaling
        self.needs_data_cpus = needs_data_cpus
        self.env = dict(env or {})
        self.actors: List[Any] = []
        self.meta: List[WorkerMeta] = []
        self.placement_group = None
        self._poll_refs: Dict[Any, int] = {}
        self.data_plan: Optional[DataPlan] = None

    def __len__(self) -> int:
        return len(self.actors)

    def start(self) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from engine._internal.run_state import timeline
        from engine._internal.ray_runtime.start import ensure_ray
        from engine._internal.worker_group.worker import TrainWorker

        timeline.mark("ray_start")
        ensure_ray()
        timeline.mark("ray_started")
        self._check_resources()
        bundles = [self.scaling.worker_resources for _ in range(self.scaling.num_workers)]
        # Bundles after the workers' hold the actors a worker starts itself (RLlib's env
        # runners): the workers' children are then placed in this placement group.
        child_bundles = _child_bundles(self.scaling)
        self.placement_group = placement_group(bundles + child_bundles,
                                               strategy=self.scaling.placement_strategy)
        timeout = constants.get(constants.PLACEMENT_GROUP_TIMEOUT_ENV_VAR)
        ready, _ = ray.wait([self.placement_group.ready()], timeout=timeout)
        if not ready:
            self.shutdown()
            raise WorkerGroupStartupError(
                f"The cluster could not place {self.scaling.num_workers} workers of "
                f"{self.scaling.worker_resources} ({self.scaling.placement_strategy}) within "
                f"{timeout:.0f} s. Lower ScalingConfig(num_workers=...) or "
                "resources_per_worker, or add nodes; set "
                f"{constants.PLACEMENT_GROUP_TIMEOUT_ENV_VAR} to wait longer."
            )
        res = self.scaling.worker_resources
        remote_cls = ray.remote(TrainWorker)
        for i in range(self.scaling.num_workers):
            opts: Dict[str, Any] = dict(
                num_cpus=res.get("CPU", 0), num_gpus=res.get("GPU", 0),
                resources={k: v for k, v in res.items() if k not in ("CPU", "GPU")},
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.placement_group, placement_group_bundle_index=i,
                    placement_group_capture_child_tasks=True if child_bundles else None),
                max_concurrency=4, max_restarts=0,
            )
            self.actors.append(remote_cls.options(**opts).remote(self.env or None))
        try:
            infos = ray.get([a.node_info.remote() for a in self.actors])
        except Exception as exc:
            self.shutdown()
            raise WorkerGroupStartupError(
                f"Training workers failed to start: {exc}"
            ) from exc
        self._assign_ranks(infos)
        timeline.mark("workers_started")

    def plan_data(self) -> DataPlan:
        """Before :meth:`start`: how the datasets reach the workers when the workers
        would leave no CPU for Ray Data (``engine._internal.data.plan``); a fractional
        plan lowers this group's CPU reservation per worker. Logged when not plain
        streaming."""
        import ray

        from engine._internal.ray_runtime.instance import started_by_trainyard
        from engine._internal.ray_runtime.start import ensure_ray

        ensure_ray()
        if not self.needs_data_cpus or os.environ.get("RAY_ADDRESS"):
            self.data_plan = DataPlan(STREAM)
            return self.data_plan
        res = self.scaling.worker_resources
        plan = plan_data(self.scaling.num_workers, res.get("CPU", 0.0),
                         "CPU" in (self.scaling.resources_per_worker or {}),
                         ray.cluster_resources().get("CPU", 0.0), started_by_trainyard())
        if plan.kind == FRACTIONAL:
            self.scaling = dataclasses.replace(self.scaling, resources_per_worker={
                **(self.scaling.resources_per_worker or {}), "CPU": plan.worker_cpus})
        if plan.message:
            logger.warning("%s", plan.message)
        self.data_plan = plan
        return plan

    def _check_resources(self) -> None:
        import ray

        if os.environ.get("RAY_ADDRESS"):
            return  # an autoscaling cluster may add nodes: the placement timeout decides
        total = ray.cluster_resources()
        need = self.scaling.worker_resources
        for key, per_worker in need.items():
            have = total.get(key, 0.0)
            if per_worker * self.scaling.num_workers > have + 1e-9:
                hint = ("set use_gpu=False or run on a machine with GPUs" if key == "GPU"
                        else f"lower num_workers or resources_per_worker, or start Ray with "
                             f"more logical CPUs ({constants.RAY_NUM_CPUS_ENV_VAR}=N)")
                raise WorkerGroupStartupError(
                    f"ScalingConfig asks for {self.scaling.num_workers} workers × "
                    f"{per_worker:g} {key} but this Ray cluster has {have:g} {key} in all: "
                    f"{hint}."
                )
        for key, extra in _sum_bundles(_child_bundles(self.scaling)).items():
            want = need.get(key, 0.0) * self.scaling.num_workers + extra
            if want > total.get(key, 0.0) + 1e-9:
                raise WorkerGroupStartupError(
                    f"The workers and the actors they start (e.g. RLlib's env runners) need "
                    f"{want:g} {key} but this Ray cluster has {total.get(key, 0.0):g} {key} "
                    "in all: lower ScalingConfig(num_workers=...) or resources_per_worker, or "
                    f"start Ray with more logical CPUs ({constants.RAY_NUM_CPUS_ENV_VAR}=N)."
                )
        spare = total.get("CPU", 0.0) - need.get("CPU", 0.0) * self.scaling.num_workers
        if self.needs_data_cpus and spare < 1 and self.data_plan is None:
            raise WorkerGroupStartupError(
                f"The workers take all {total.get('CPU', 0):g} CPUs of this Ray instance and "
                "leave none for Ray Data to read the datasets, so training would wait "
                "forever. Start Ray with more logical CPUs before creating datasets "
                "(ray.init(num_cpus=4), or let trainyard start it: "
                f"{constants.RAY_NUM_CPUS_ENV_VAR}=4), or give workers less: "
                "ScalingConfig(resources_per_worker={'CPU': 0.5})."
            )

    def _assign_ranks(self, infos: List[Dict[str, Any]]) -> None:
        node_order: List[str] = []
        for info in infos:
            if info["node_id"] not in node_order:
                node_order.append(info["node_id"])
        order = sorted(range(len(infos)), key=lambda i: (node_order.index(infos[i]["node_id"]), i))
        self.actors = [self.actors[i] for i in order]
        metas = [WorkerMeta(**infos[i]) for i in order]
        per_node: Dict[str, int] = {}
        for rank, meta in enumerate(metas):
            meta.world_rank = rank
            meta.local_rank = per_node.get(meta.node_id, 0)
            per_node[meta.node_id] = meta.local_rank + 1
            meta.node_rank = node_order.index(meta.node_id)
        for meta in metas:
            meta.local_world_size = per_node[meta.node_id]
        self.meta = metas

    def check_storage(self, storage: Any) -> None:
        from engine._internal.storage.check import check_from_workers

        check_from_workers(storage, self)

    def start_training(self, train_func: Callable, config: Optional[Dict[str, Any]],
                       session_args: List[Dict[str, Any]],
                       before_train: Optional[Callable[[], None]] = None) -> None:
        """Start ``train_func`` on every worker (rank i gets ``session_args[i]``)."""
        import ray

        fn_ref = ray.put(train_func)  # shipped once, not once per worker
        ray.get([actor.start_training.remote(fn_ref, config, args, before_train)
                 for actor, args in zip(self.actors, session_args)])
        self._poll_refs = {a.poll.remote(constants.POLL_TIMEOUT_S): r
                           for r, a in enumerate(self.actors)}

    def poll(self, timeout: float) -> List[PollResult]:
        """Long-poll the running workers: wait up to ``timeout`` for any to say something,
        then collect every answer that is in. Ranks that have not finished are polled
        again; an empty list means nobody answered in time."""
        import ray
        from ray.exceptions import RayActorError

        if not self._poll_refs:
            return []
        ready, _ = ray.wait(list(self._poll_refs), num_returns=1, timeout=timeout)
        if not ready:
            return []
        ready, _ = ray.wait(list(self._poll_refs), num_returns=len(self._poll_refs), timeout=0)
        out = []
        for ref in ready:
            rank = self._poll_refs.pop(ref)
            try:
                items, finished, error = ray.get(ref)
            except RayActorError as exc:
                node = self.meta[rank].node_ip if rank < len(self.meta) else ""
                out.append(PollResult(rank, [], error=worker_died(rank, node,
                                                                  type(exc).__name__)))
                continue
            out.append(PollResult(rank, items, finished, error))
            if not finished and error is None:
                self._poll_refs[self.actors[rank].poll.remote(constants.POLL_TIMEOUT_S)] = rank
        return sorted(out, key=lambda r: r.rank)

    def execute_async(self, fn: Callable, *args: Any, **kwargs: Any) -> List[Any]:
        return [a.execute.remote(fn, *args, **kwargs) for a in self.actors]

    def execute(self, fn: Callable, *args: Any, **kwargs: Any) -> List[Any]:
        import ray

        return ray.get(self.execute_async(fn, *args, **kwargs))

    def execute_single(self, rank: int, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        import ray

        return ray.get(self.actors[rank].execute.remote(fn, *args, **kwargs))

    def worker_call(self, rank: int, method: str, *args: Any, timeout: float = 10.0) -> Any:
        """Call a ``TrainWorker`` method on one rank and wait at most ``timeout``."""
        import ray

        return ray.get(getattr(self.actors[rank], method).remote(*args), timeout=timeout)

    def shutdown(self, graceful: bool = False) -> None:
        """Stop the workers: let them exit cleanly when training ended (``graceful``),
        kill them outright after a failure, where one may be stuck in a collective."""
        import ray
        from ray.util.placement_group import remove_placement_group

        if graceful and self.actors:
            refs = [a.__ray_terminate__.remote() for a in self.actors]
            ray.wait(refs, num_returns=len(refs), timeout=constants.GRACEFUL_EXIT_TIMEOUT_S)
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already dead
                pass
        self.actors = []
        self._poll_refs = {}
        if self.placement_group is not None:
            try:
                remove_placement_group(self.placement_group)
            except Exception:
                pass
            self.placement_group = None
        from engine._internal.ray_runtime.logs import sweep_worker_logs_if_due

        sweep_worker_logs_if_due()


def drain(group: Any, seconds: float) -> List[PollResult]:
    """Everything ``group`` says within ``seconds``, until a poll finds it quiet: after
    one rank failed, what the others reported meanwhile (or that they died)."""
    out: List[PollResult] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        results = group.poll(max(0.0, deadline - time.monotonic()))
        if not results:
            break
        out.extend(results)
    return out
