"""What DAG files call at parse time (cheap: no pipeline module, no Ray, no framework):
the model asset, which pipelines get DAGs, the retrain schedule.
"""

from __future__ import annotations

from typing import List, Optional

from airflow.sdk import Asset

from engine import constants

#: The alias the retrain DAGs promote and the batch-predict DAGs score with.
DEFAULT_ALIAS = "production"
#: Which pipelines get a retrain and a batch-predict DAG (comma-separated names; unset
#: or empty: every pipeline discovery finds).
PIPELINES_ENV_VAR = constants.AIRFLOW_PIPELINES_ENV_VAR
#: The retrain DAGs' cron schedule.
SCHEDULE_ENV_VAR = constants.RETRAIN_SCHEDULE_ENV_VAR
DEFAULT_SCHEDULE = "0 3 * * 1"  # Mondays 03:00 UTC, as deploy/prefect.yaml
ASSET_URI_SCHEME = "trainyard"


def model_asset(pipeline: str, alias: str = DEFAULT_ALIAS) -> Asset:
    """The Airflow asset of a pipeline's aliased model: ``trainyard://models/<pipeline>/
    <alias>``. ``promote_task`` lists it as an outlet; DAGs scheduled on it run after
    each successful promotion."""
    return Asset(name=f"trainyard-model-{pipeline}-{alias}",
                 uri=f"{ASSET_URI_SCHEME}://models/{pipeline}/{alias}", group="model")


def dag_pipelines() -> List[str]:
    """The pipelines to build DAGs for: ``$TRAINYARD_AIRFLOW_PIPELINES`` (comma-separated),
    by default every pipeline discovery finds (trainyard's own and every installed
    plugin's). Only names are read: no pipeline module is imported at parse time, and a
    plugin that cannot load fails its own DAG's first task, not the others.

    Raises:
        ValueError: a name discovery does not know (the DAG file's import error then
            says which names exist).
    """
    from pipelines import list_pipelines  # entry points and names only: nothing loads

    known = list_pipelines()
    value = constants.get(PIPELINES_ENV_VAR)
    if not value:
        return known
    names = [p.strip() for p in value.split(",") if p.strip()]
    unknown = [p for p in names if p not in known]
    if unknown:
        raise ValueError(f"{PIPELINES_ENV_VAR} names unknown pipelines {unknown}: use "
                         f"{known} (or install the package that provides them).")
    return names


def retrain_schedule() -> Optional[str]:
    """The retrain DAGs' cron schedule: ``$TRAINYARD_RETRAIN_SCHEDULE``, default
    :data:`DEFAULT_SCHEDULE`; ``none`` (or empty): no schedule, runs start only when
    triggered (the UI, ``airflow dags trigger``, the REST API)."""
    value = constants.get(SCHEDULE_ENV_VAR)
    return None if value.lower() in ("", "none") else value
