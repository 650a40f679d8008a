"""Prefect 3 tasks: the steps of ``tasks`` with retries, JSON results and artifacts.

    from prefect import flow
    from tasks.prefect import ingest, split, train

    @flow
    def my_flow():
        data = ingest("sklearn:digits")
        splits = split(data, 0.2, 0, "target")
        return train("digits", splits, {"num_workers": 2})

The step names are those of ``from tasks import ...`` (each also under its former name,
``ingest_task`` …). ``steps`` holds the task wrappers, ``events`` the promotion events and
webhook notifications, ``results`` the result storage under the run's storage root.
Only wrapping lives here; every step's logic is in ``tasks.steps``.
"""

from tasks.prefect.events import (FLOW_FAILED_EVENT, PROMOTED_EVENT, REJECTED_EVENT,
                                  emit_decision_event, model_resource_id,
                                  notify_flow_failure, notify_rejection)
from tasks.prefect.results import (RESULTS_DIR, StorageRootResults, result_storage_for,
                                   task_options)
from tasks.prefect.steps import (RETRIES, RETRY_DELAY_S, batch_predict_task, evaluate_task,
                                 ingest_task, promote_task, report_task,
                                 retry_unless_config_error, split_task, train_task,
                                 tune_task, validate_task)

# The public step names, the same as ``from tasks import ...``.
ingest, validate, split, train = ingest_task, validate_task, split_task, train_task
tune, evaluate, batch_predict, promote = tune_task, evaluate_task, batch_predict_task, \
    promote_task
report = report_task

__all__ = ["ingest", "validate", "split", "train", "tune", "evaluate", "batch_predict",
           "promote", "report", "report_task", "ingest_task", "validate_task", "split_task",
           "train_task", "tune_task", "evaluate_task", "promote_task", "batch_predict_task",
           "retry_unless_config_error", "RETRIES", "RETRY_DELAY_S", "PROMOTED_EVENT",
           "REJECTED_EVENT", "model_resource_id", "emit_decision_event", "notify_rejection",
           "notify_flow_failure", "FLOW_FAILED_EVENT", "RESULTS_DIR", "result_storage_for",
           "task_options", "StorageRootResults"]
