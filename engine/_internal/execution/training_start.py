"""What an attempt starts the workers with: how the datasets reach them (planned before
they reserve their CPUs) and each rank's session arguments (context, shards, checkpoint,
storage, output files)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from engine._internal.data.plan import MATERIALIZE
from engine._internal.run_state import timeline
from engine._internal.run_state.record import RunRecord
from engine._internal.run_state.spec import RunSpec
from engine._internal.storage.filesystem import Storage
from engine._internal.worker_group.group import WorkerGroup
from engine._internal.worker_group.output_capture import OutputFiles
from engine._internal.worker_group.session import TrainContext, resource_bundles, working_dir
from engine.checkpoint import Checkpoint
from engine.config import log_file_names

Splits = Dict[str, List[Any]]


def plan_data(group: WorkerGroup, spec: RunSpec, materialized: Optional[Splits]
              ) -> Optional[Splits]:
    """Before the workers reserve their CPUs: the worker group decides how the datasets
    reach them (``data.plan``); "materialize" reads and splits them now, while Ray Data
    still has CPUs (once per run: retries reuse the splits ``materialized`` holds)."""
    planner = getattr(group, "plan_data", None)
    if planner is None or not spec.datasets:
        return materialized
    plan = planner()
    if plan.kind == MATERIALIZE and materialized is None:
        from engine._internal.data.datasets import materialize_splits

        return materialize_splits(spec.datasets, spec.data_config,
                                  spec.scaling_config.num_workers)
    return materialized


def dataset_shards(spec: RunSpec, n: int, materialized: Optional[Splits]) -> Splits:
    """Dataset name -> one shard per rank: from the materialized splits, else planned
    now (Ray Data, or files each worker reads itself)."""
    if materialized is not None:
        return {k: [part.iterator() for part in v] for k, v in materialized.items()}
    if not spec.datasets:
        return {}
    from engine._internal.data.datasets import make_shards

    shards = make_shards(spec.datasets, spec.data_config, n,
                         read_files_directly=spec.read_files_directly)
    timeline.mark("shards_planned")
    return shards


def session_args(spec: RunSpec, group: WorkerGroup, storage: Storage, record: RunRecord,
                 name: str, tag: str, checkpoint: Optional[Checkpoint],
                 start_iteration: int, shards: Splits, scheduled_at: float,
                 checkpoints_enabled: bool) -> List[Dict[str, Any]]:
    """Each rank's session arguments for ``WorkerGroup.start_training``."""
    log_names = log_file_names(spec.run_config.log_to_file)
    experiment = str(spec.trial_info.get("experiment_name") or name)
    workdir = working_dir(storage, experiment, name)
    bundles = resource_bundles(spec.scaling_config)
    out = []
    for rank, meta in enumerate(group.meta):
        ctx = TrainContext(
            world_rank=rank, local_rank=meta.local_rank, world_size=len(group),
            local_world_size=meta.local_world_size, node_rank=meta.node_rank,
            trial_name=name, trial_id=record.trial_id,
            experiment_name=experiment, run_dir=storage.display(),
            working_dir=workdir, resource_bundles=bundles,
        )
        out.append(dict(
            context=ctx, storage=storage if checkpoints_enabled else None,
            attempt=tag, start_iteration=start_iteration, checkpoint=checkpoint,
            dataset_shards={k: v[rank] for k, v in shards.items()},
            trial_info={"time_total_s": record.time_total_s, "scheduled_at": scheduled_at},
            output=OutputFiles(storage, log_names, rank) if log_names else None,
        ))
    return out
