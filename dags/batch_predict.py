"""Batch prediction with the newly promoted model, one DAG per pipeline:
``batch_predict_<pipeline>``.

    plan → resolve_model → ingest → batch_predict

Scheduled on the model's asset (``trainyard://models/<pipeline>/production``): each
promotion by ``retrain_<pipeline>`` (dags/retrain.py) emits one event, and the scheduler
starts one run. ``resolve_model`` reads the ``production`` alias when the run starts, so
it scores with the checkpoint the latest promotion set (the triggering event's ``extra``
names it too, and is logged). A manual run scores with whatever ``production`` points at.

Params: ``storage`` (default ``$TRAINYARD_STORAGE_PATH``; the retrain DAG's storage),
``source`` (the rows to score; default the pipeline's data), ``output`` (default under
``<storage>/predictions/``), ``num_workers`` (scoring actors), ``execution`` (``ray_job``:
score in a Ray job, the task deferring meanwhile; default ``$TRAINYARD_EXECUTION``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Dict

from airflow.sdk import DAG, Param, dag, get_current_context, task

from tasks.airflow import (DEFAULT_ALIAS, batch_predict_task, dag_pipelines,
                           failure_notifier, ingest_task, model_asset,
                           resolve_model_task, xcom_uri)

PARAMS = {
    "storage": Param(None, type=["null", "string"],
                     description="Storage root (where the alias lives); default "
                                 "$TRAINYARD_STORAGE_PATH or ~/trainyard_results."),
    "source": Param(None, type=["null", "string"],
                    description="Rows to score; default the pipeline's data."),
    "output": Param(None, type=["null", "string"],
                    description="Directory for the predictions; default under "
                                "<storage>/predictions/."),
    "num_workers": Param(1, type="integer", minimum=1, description="Scoring actors."),
    "execution": Param(None, type=["null", "string"], enum=[None, "local", "ray_job"],
                       description="ray_job: score in a Ray job on the cluster of the "
                                   "trainyard_ray connection (the task defers); default "
                                   "$TRAINYARD_EXECUTION or local."),
}


@task(task_id="plan", multiple_outputs=True)
def plan(pipeline: str) -> Dict[str, Any]:
    """The run's settings: params over the pipeline's defaults, as JSON."""
    from pipelines import get_pipeline
    from engine.storage import default_root

    p = get_current_context()["params"]
    spec = get_pipeline(pipeline)
    # XCom gets URIs without credentials; each task reopens them with theirs.
    return {"storage": xcom_uri(default_root(p["storage"])),
            "source": p["source"] or spec.source, "output": xcom_uri(p["output"]),
            "num_workers": p["num_workers"], "execution": p["execution"]}


def build_batch_predict_dag(pipeline: str, alias: str = DEFAULT_ALIAS) -> DAG:
    """The ``batch_predict_<pipeline>`` DAG, scheduled on ``model_asset(pipeline, alias)``."""

    @dag(dag_id=f"batch_predict_{pipeline}", schedule=[model_asset(pipeline, alias)],
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False,
         max_active_runs=1, params=PARAMS, tags=["trainyard", "predict", pipeline],
         default_args={"on_failure_callback": failure_notifier()}, doc_md=__doc__,
         description=f"Score {pipeline} data with the {alias} model after each promotion.")
    def batch_predict() -> None:
        settings = plan(pipeline)
        model = resolve_model_task(pipeline, alias, storage=settings["storage"])
        data = ingest_task(settings["source"], storage=settings["storage"])
        batch_predict_task(model, data, settings["output"],
                           num_workers=settings["num_workers"],
                           execution=settings["execution"])

    return batch_predict()


for _pipeline in dag_pipelines():
    globals()[f"batch_predict_{_pipeline}"] = build_batch_predict_dag(_pipeline)
