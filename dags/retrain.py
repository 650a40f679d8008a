"""Scheduled retraining, one DAG per pipeline: ``retrain_<pipeline>``.

    plan → ingest → validate → split → data_changed → tune → final_config → train → evaluate → promote

``plan`` reads the DAG run's params and the pipeline's defaults; ``validate`` checks the
data against the pipeline's schema and for drift (a failed hard check fails the run
before training; the report is in the task log and XCom); ``tune`` searches the
pipeline's small grid for a few epochs; ``final_config`` takes the best config and the
full epoch count; ``train`` trains it (a retry resumes the run from its latest
checkpoint); ``promote`` points the ``production`` alias at the checkpoint if its
validation metrics pass the gate, and only then emits an event on the model's asset
(``trainyard://models/<pipeline>/production``), which schedules
``batch_predict_<pipeline>`` (dags/batch_predict.py). A failed gate skips ``promote``
and posts the gate's reasons to the ``trainyard_webhook`` connection
(``tasks.airflow.WebhookNotifier``); so does a task that fails for good.

Cron schedule: ``$TRAINYARD_RETRAIN_SCHEDULE`` (default Mondays 03:00 UTC; ``none``:
triggered runs only), no catch-up, one run at a time. Pipelines: ``$TRAINYARD_AIRFLOW_PIPELINES`` (comma-separated; default:
every pipeline discovery finds — trainyard's own and every installed plugin's).
Storage: the ``storage`` param, else ``$TRAINYARD_STORAGE_PATH`` (``s3://…`` on a cluster).
Training runs on the Ray cluster at ``$RAY_ADDRESS``, or on a local Ray; with the
``execution`` param (or ``$TRAINYARD_EXECUTION``) ``ray_job``, tune, train and evaluate
are Ray jobs on the cluster of the ``trainyard_ray`` connection, and the tasks defer
while they run (the triggerer must be running).

Parsing this file imports Airflow's task SDK and trainyard's small reference modules
only; Ray, torch and the rest load inside the task bodies.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Dict, Optional

from airflow.sdk import DAG, Param, dag, get_current_context, task

from tasks.airflow import (DEFAULT_ALIAS, dag_pipelines, evaluate_task,
                           failure_notifier, ingest_task, model_asset, promote_task,
                           rejection_notifier, retrain_schedule,
                           skip_if_unchanged_task, split_task, train_task, tune_task,
                           validate_task, xcom_uri)

PARAMS = {
    "storage": Param(None, type=["null", "string"],
                     description="Storage root (local path or s3:// URI); default "
                                 "$TRAINYARD_STORAGE_PATH or ~/trainyard_results."),
    "source": Param(None, type=["null", "string"],
                    description="Data to train on; default the pipeline's."),
    "num_workers": Param(2, type="integer", minimum=1,
                         description="Training workers (per tuning trial, too)."),
    "test_size": Param(0.2, type="number", exclusiveMinimum=0, exclusiveMaximum=1),
    "seed": Param(0, type="integer"),
    "param_space": Param(None, type=["null", "object"],
                         description='Search space, e.g. {"lr": {"grid_search": [0.001, '
                                     '0.005]}}; default the pipeline\'s.'),
    "tune_samples": Param(1, type="integer", minimum=1, description="Repeats of the grid."),
    "tune_epochs": Param(3, type="integer", minimum=1,
                         description="Epochs (boosting rounds) per tuning trial."),
    "train_epochs": Param(None, type=["null", "integer"], minimum=1,
                          description="Epochs of the final training; default the "
                                      "pipeline's."),
    "train_config": Param({}, type="object",
                          description="More hyperparameters of the final training."),
    "gate": Param(None, type=["null", "object"],
                  description='Promotion gate, e.g. {"accuracy": [">=0.9", '
                              '">=champion"]} (champion: the current model on the same '
                              'validation data); default the pipeline\'s.'),
    "max_failures": Param(0, type="integer", minimum=-1,
                          description="Engine restarts inside a task (0: Airflow retries "
                                      "the task, which resumes)."),
    "validate": Param(True, type="boolean",
                      description="Check the data (the pipeline's schema, drift against "
                                  "the production model's training data) before training."),
    "checks": Param(None, type=["null", "object"],
                    description='More validation checks, e.g. {"min_rows": 1000, "drift": '
                                '{"threshold": 0.1, "fail": true}}.'),
    "window": Param(None, type=["null", "object"],
                    description='A Hive-partitioned source: the partitions to read, e.g. '
                                '{"column": "date", "last": "30d"}; it ends at the run\'s '
                                'data interval end unless it says "until".'),
    "partition_filter": Param(None, type=["null", "object"],
                              description='A Hive-partitioned source: e.g. {"region": '
                                          '["eu", "us"]}.'),
    "incremental": Param(False, type="boolean",
                         description="Read only partitions that changed since the last "
                                     "ingest; none: reuse the previous data set."),
    "conn_id": Param(None, type=["null", "string"],
                     description="Read a database: the Airflow connection that holds it "
                                 "(its password stays in Airflow's secrets backend); with "
                                 "table or sql."),
    "table": Param(None, type=["null", "string"], description="With conn_id: the table."),
    "sql": Param(None, type=["null", "string"], description="With conn_id: the query."),
    "skip_if_unchanged": Param(False, type="boolean",
                               description="Skip training when the production model was "
                                           "trained on exactly this data."),
    "execution": Param(None, type=["null", "string"], enum=[None, "local", "ray_job"],
                       description="ray_job: tune, train and evaluate run as Ray jobs on "
                                   "the cluster of the trainyard_ray connection and defer "
                                   "meanwhile; default $TRAINYARD_EXECUTION or local."),
}


@task(task_id="plan", multiple_outputs=True)
def plan(pipeline: str) -> Dict[str, Any]:
    """The run's settings: params over the pipeline's defaults, as JSON."""
    from pipelines import get_pipeline
    from engine.storage import default_root

    p = get_current_context()["params"]
    spec = get_pipeline(pipeline)
    storage = xcom_uri(default_root(p["storage"]))  # each task reopens it with credentials
    return {
        "storage": storage,
        "source": p["source"] or spec.source,
        "test_size": p["test_size"], "seed": p["seed"],
        "stratify_column": spec.label_column if spec.task == "classification" else None,
        "scaling": {"num_workers": p["num_workers"]},
        "param_space": p["param_space"],
        "tune_config": {"num_samples": p["tune_samples"], "seed": p["seed"]},
        "tune_run": {"storage": storage,
                     "config": {spec.epochs_key: p["tune_epochs"]} if spec.epochs_key else {},
                     "max_failures": p["max_failures"], "num_to_keep": 1,
                     "execution": p["execution"]},
        "train_run": {"storage": storage, "config": dict(p["train_config"] or {}),
                      "max_failures": p["max_failures"], "execution": p["execution"]},
        "execution": p["execution"],
        # A model without epochs (scikit-learn) has no epochs key: nothing to set.
        "train_epochs": p["train_epochs"] or spec.defaults.get(spec.epochs_key or ""),
        "epochs_key": spec.epochs_key,
        "gate": p["gate"],
        "validate": p["validate"], "checks": p["checks"],
        "window": p["window"], "partition_filter": p["partition_filter"],
        "incremental": p["incremental"], "skip_if_unchanged": p["skip_if_unchanged"],
        "conn_id": p["conn_id"], "table": p["table"], "sql": p["sql"],
    }


@task(task_id="final_config")
def final_config(train_run: Dict[str, Any], tuned: Dict[str, Any],
                 epochs_key: Optional[str], train_epochs: Optional[int]) -> Dict[str, Any]:
    """The final training's ``run``: the best tuned config, the extra hyperparameters
    over it, and the full epoch count."""
    config = {**tuned["best_config"], **train_run["config"]}
    if epochs_key and train_epochs:
        config[epochs_key] = train_epochs
    return {**train_run, "config": config}


def build_retrain_dag(pipeline: str, alias: str = DEFAULT_ALIAS) -> DAG:
    """The ``retrain_<pipeline>`` DAG."""

    @dag(dag_id=f"retrain_{pipeline}", schedule=retrain_schedule(),
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False,
         max_active_runs=1, params=PARAMS, tags=["trainyard", "retrain", pipeline],
         default_args={"on_failure_callback": failure_notifier()}, doc_md=__doc__,
         description=f"Retrain {pipeline}, promote it to {alias} if it passes the gate.")
    def retrain() -> None:
        settings = plan(pipeline)
        data = ingest_task(settings["source"], storage=settings["storage"],
                           partition_filter=settings["partition_filter"],
                           window=settings["window"], incremental=settings["incremental"],
                           conn_id=settings["conn_id"], table=settings["table"],
                           sql=settings["sql"])
        checked = validate_task(data, pipeline, checks=settings["checks"],
                                storage=settings["storage"], enabled=settings["validate"])
        splits = split_task(checked["dataset"], settings["test_size"], settings["seed"],
                            settings["stratify_column"])
        changed = skip_if_unchanged_task(pipeline, splits["train"],
                                         settings["skip_if_unchanged"], alias,
                                         settings["storage"])
        tuned = tune_task(pipeline, splits, settings["param_space"],
                          settings["tune_config"], scaling=settings["scaling"],
                          run=settings["tune_run"])
        changed >> tuned
        run = final_config(settings["train_run"], tuned, settings["epochs_key"],
                           settings["train_epochs"])
        checkpoint = train_task(pipeline, splits, settings["scaling"], run)
        metrics = evaluate_task(checkpoint, splits["validation"], settings["execution"])
        promote_task.override(outlets=[model_asset(pipeline, alias)],
                              on_skipped_callback=rejection_notifier())(
            checkpoint, metrics, alias, settings["gate"], dataset=splits["validation"])

    return retrain()


for _pipeline in dag_pipelines():
    globals()[f"retrain_{_pipeline}"] = build_retrain_dag(_pipeline)
