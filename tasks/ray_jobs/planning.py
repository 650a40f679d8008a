"""Planning a step's Ray job: in ``ray_job`` mode, check every input before anything is
written, ship the pipeline's code and connect to the job server (``local``: None).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Dict, Optional

from tasks.ray_jobs import shipping
from tasks.ray_jobs.settings import (LOCAL, current_caller, digest, execution_mode, job_address,
                                     job_name, job_storage_root, orchestrator_run_id)
from tasks.ray_jobs.submission import StepJob, job_runtime_env


def plan(step: str, kwargs: Dict[str, Any]) -> Optional["StepJob"]:
    """The Ray job of a step call in ``ray_job`` mode (connected to the job server), or
    None in ``local`` mode. Every input error is raised here, before anything is written.

    Args:
        step: ``train``, ``tune``, ``evaluate`` or ``batch_predict``.
        kwargs: The step's keyword arguments as ``tasks.steps`` takes them.

    Raises:
        ConfigError: an unknown mode or pipeline, no job address, a job server that
            does not answer, ``memory://`` storage, a malformed runtime_env.
    """
    if step in ("train", "tune"):
        run = dict(kwargs.get("run") or {})
        if execution_mode(run.get("execution")) == LOCAL:
            return None
        _check_pipeline(kwargs["pipeline"])
        run.setdefault("name", None)
        run["name"] = run["name"] or (f"{kwargs['pipeline']}-{step}-"
                                      f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")
        kwargs = {**kwargs, "run": run}
        storage, runtime_env, key = run.get("storage"), run.get("runtime_env"), run["name"]
        pipeline: Optional[str] = kwargs["pipeline"]
    else:
        if execution_mode(kwargs.get("execution")) == LOCAL:
            return None
        from tasks.refs import CheckpointRef, DatasetRef

        ckpt = CheckpointRef.from_dict(kwargs["checkpoint"])
        data = DatasetRef.from_dict(kwargs["dataset"])
        storage, runtime_env, pipeline = ckpt.storage, kwargs.get("runtime_env"), ckpt.pipeline
        key = digest(ckpt.uri, data.fingerprint, {k: v for k, v in kwargs.items() if k not in (
            "checkpoint", "dataset", "execution", "runtime_env")}, orchestrator_run_id())
    job_runtime_env(runtime_env, "", "", "", None)  # validates its shape
    # The pipeline plugin's code goes with the job unless runtime_env ships it (issue 21).
    runtime_env = shipping.with_pipeline(runtime_env, pipeline)
    job = StepJob(step=step, kwargs=jsonable(kwargs), name=job_name(step, key),
                  storage=job_storage_root(storage),
                  address=job_address(current_caller().address),
                  token=current_caller().token,
                  runtime_env=runtime_env, orchestrator_run_id=orchestrator_run_id())
    job.client  # noqa: B018 - connect now: an unreachable server fails before any write
    return job


def _check_pipeline(name: str) -> None:
    from pipelines import UnknownPipelineError, list_pipelines

    if name not in list_pipelines():
        raise UnknownPipelineError(f"Unknown pipeline {name!r}: use one of "
                                   f"{list_pipelines()}.")


def jsonable(value: Any) -> Any:
    """References (and dicts/lists of them) as plain JSON values."""
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value
