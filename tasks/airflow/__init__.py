"""Airflow 3 TaskFlow tasks: the steps of ``tasks``, references through XCom as JSON.

    from airflow.sdk import dag
    from tasks.airflow import ingest, split, train

    @dag(schedule=None)
    def my_dag():
        data = ingest("sklearn:digits")
        splits = split(data, 0.2, 0, "target")
        train("digits", splits, {"num_workers": 2})

Laid out like an Airflow provider: ``steps`` (the task helpers, with ``Asset`` outlets),
``hook`` (connections: the webhook, the Ray job server, databases; URIs without their
credentials in XCom), ``triggers`` (``RayJobTrigger``: a deferred step's Ray job),
``notifier`` (``WebhookNotifier``) and ``dag_files`` (what DAG files call at parse time).
The step names are those of ``from tasks import ...`` (each also under its former name,
``ingest_task`` …). Importing this package imports Airflow's task SDK and nothing heavy.
"""

from tasks.airflow.dag_files import (ASSET_URI_SCHEME, DEFAULT_ALIAS, DEFAULT_SCHEDULE,
                                     PIPELINES_ENV_VAR, SCHEDULE_ENV_VAR, dag_pipelines,
                                     model_asset, retrain_schedule)
from tasks.airflow.hook import (DEFAULT_RAY_CONN_ID, DEFAULT_WEBHOOK_CONN_ID,
                                RAY_CONN_ID_ENV_VAR, WEBHOOK_CONN_ENV_VAR, full_uri,
                                ray_job_address, xcom_uri)
from tasks.airflow.notifier import (REJECTION_XCOM_KEY, WebhookNotifier, failure_notifier,
                                    rejection_notifier)
from tasks.airflow.steps import (RETRIES, TRIGGER_POLL_S, batch_predict_task, evaluate_task,
                                 ingest_task, promote_task, resolve_model_task,
                                 skip_if_unchanged_task, split_task, train_task, tune_task,
                                 validate_task)

# The public step names, the same as ``from tasks import ...``.
ingest, validate, split, train = ingest_task, validate_task, split_task, train_task
tune, evaluate, batch_predict, promote = tune_task, evaluate_task, batch_predict_task, \
    promote_task
resolve_alias, skip_if_unchanged = resolve_model_task, skip_if_unchanged_task

__all__ = ["ingest", "validate", "split", "train", "tune", "evaluate", "batch_predict",
           "promote", "resolve_alias", "skip_if_unchanged", "ingest_task", "validate_task",
           "skip_if_unchanged_task", "split_task", "train_task", "tune_task", "evaluate_task",
           "promote_task", "resolve_model_task", "batch_predict_task", "model_asset",
           "WebhookNotifier", "DEFAULT_WEBHOOK_CONN_ID", "WEBHOOK_CONN_ENV_VAR",
           "dag_pipelines", "retrain_schedule", "failure_notifier", "rejection_notifier",
           "xcom_uri", "full_uri", "RETRIES", "DEFAULT_ALIAS", "PIPELINES_ENV_VAR",
           "SCHEDULE_ENV_VAR", "RAY_CONN_ID_ENV_VAR", "ray_job_address", "ASSET_URI_SCHEME",
           "DEFAULT_SCHEDULE", "DEFAULT_RAY_CONN_ID", "REJECTION_XCOM_KEY", "TRIGGER_POLL_S"]
