"""What every step shares: the engine run name of a task in an orchestrator run, and
the error a step raises when it could not produce its output."""

from __future__ import annotations

import hashlib
from typing import Optional

from engine.exceptions import ConfigError, TrainyardError
from tasks import layout

_MAX_RUN_NAME = 120


class TaskError(TrainyardError):
    """A step could not produce its output (e.g. every tuning trial failed)."""


def run_name_for(run_id: str, task_name: str, prefix: Optional[str] = None) -> str:
    """The engine run name of a task in an orchestrator run: the same for every retry of
    that task in that run, so a retried ``train`` resumes instead of starting over.

    Args:
        run_id: The orchestrator's run id (Prefect flow run id, Airflow ``run_id``).
        task_name: The task's name in the flow/DAG (``train``).
        prefix: Optional namespace, e.g. the DAG id (Airflow run ids repeat across DAGs).

    Returns:
        ``[prefix-]task_name-run_id`` with characters other than letters, digits, ``.``,
        ``_`` and ``-`` replaced; long names are shortened with a hash suffix.
    """
    if not run_id or not task_name:
        raise ConfigError("run_name_for(run_id, task_name) needs both, e.g. "
                          "run_name_for(flow_run.id, 'train').")
    parts = [p for p in (prefix, task_name, str(run_id)) if p]
    name = layout.clean_name("-".join(parts), "run name")
    if len(name) > _MAX_RUN_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = f"{name[:_MAX_RUN_NAME - 13]}-{digest}"
    return name
