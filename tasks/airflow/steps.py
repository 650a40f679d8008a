"""Airflow 3 TaskFlow tasks: the steps of ``tasks``, references through XCom as JSON.

    from airflow.sdk import dag
    from tasks.airflow import ingest_task, split_task, train_task

    @dag(schedule=None)
    def my_dag():
        data = ingest_task("sklearn:digits")
        splits = split_task(data, 0.2, 0, "target")
        train_task("digits", splits, {"num_workers": 2})

Each task returns a reference (``tasks.refs``) as a plain JSON dict, so XCom holds URIs
and metadata only (never a data set or a model) and reads back without Airflow's
deserialization allow-list. ``train`` and ``tune`` name their engine run
``run_name_for(<DAG run id>, <task id>, prefix=<DAG id>)`` unless ``run["name"]`` is
given: a retried task resumes that run from its latest committed checkpoint.

Errors a retry cannot fix (bad configuration, unknown pipeline, malformed references)
fail the task at once (``AirflowFailException``); others are retried ``RETRIES`` times,
``retry_delay`` being Airflow's (``[core] default_task_retry_delay``, or the DAG's
``default_args``).

``promote_task`` emits an asset event for its outlets (the model's :func:`model_asset`)
only when the gate passes: a rejected candidate ends the task as *skipped*, and DAGs
scheduled on the asset do not run.

With ``execution="ray_job"`` (``run["execution"]``, the ``execution`` argument, the DAG
param, or ``$TRAINYARD_EXECUTION``) ``train``, ``tune``, ``evaluate`` and
``batch_predict`` submit their step as a Ray job (``tasks.ray_jobs``) and **defer** to
:class:`tasks.airflow.triggers.RayJobTrigger`: no worker slot is held while the job runs,
the triggerer tails the job's log into the task's log, and the task resumes to read the
reference back. The job server's address comes from the Airflow connection
``trainyard_ray`` (``$TRAINYARD_RAY_CONN_ID``; conn type ``ray`` or ``http``, host and
port of the dashboard), else ``$TRAINYARD_RAY_JOB_ADDRESS`` or an http(s)://
``$RAY_ADDRESS``. A retried task re-attaches to its job; killing the deferred task stops
it.

Importing this module imports Airflow's task SDK and nothing heavy: ``tasks.steps``,
Ray and the frameworks are imported inside the task bodies, so DAG files parse fast.
Only wrapping lives here; every step's logic is in ``tasks.steps``.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any, Callable, Dict, List, Optional

from airflow.providers.standard.decorators.python import _PythonDecoratedOperator
from airflow.sdk import Asset, get_current_context, task
from airflow.sdk.bases.decorator import task_decorator_factory
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, TaskDeferred

from tasks.airflow.dag_files import DEFAULT_ALIAS
from tasks.airflow.hook import (connection_source, full_uri, ray_conn_id, ray_job_address,
                                ray_job_token, xcom_uri)
from tasks.airflow.notifier import REJECTION_XCOM_KEY

logger = logging.getLogger("tasks.airflow")


#: Task retries (a retried ``train`` or ``tune`` resumes, so a retry is cheap).
RETRIES = 2
#: Seconds between the trigger's polls of a deferred task's Ray job.
TRIGGER_POLL_S = 2.0


# --- helpers ----------------------------------------------------------------------------
def _not_retried() -> tuple:
    from engine.exceptions import ConfigError
    from pipelines import UnknownPipelineError
    from tasks.refs import RefError

    return (ConfigError, RefError, UnknownPipelineError, ImportError, TypeError)


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; an error in the inputs fails the task without retries."""
    try:
        return fn(*args, **kwargs)
    except _not_retried() as exc:
        raise AirflowFailException(f"{type(exc).__name__}: {exc} (not retried: a retry "
                                   "would fail the same way)") from exc


def _run_settings(run: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """``run`` with a name derived from the DAG run and this task, unless it has one, and
    its storage with the credentials XCom does not hold."""
    from tasks import steps

    out = dict(run or {})
    if out.get("storage"):
        out["storage"] = full_uri(out["storage"])
    if not out.get("name"):
        ctx = get_current_context()
        ti = ctx["ti"]
        name = ti.task_id if (ti.map_index is None or ti.map_index < 0) \
            else f"{ti.task_id}-{ti.map_index}"
        out["name"] = steps.run_name_for(ctx["run_id"], name, prefix=ti.dag_id)
        logger.info("Engine run %r (a retry of this task resumes it).", out["name"])
    return out


# --- steps that may run as Ray jobs (deferrable) ---------------------------------------
# The trigger's event while the task resumes (see _StepOperator.execute_complete).
_RESUME: ContextVar[Optional[Dict[str, Any]]] = ContextVar("trainyard_resume", default=None)


class _StepOperator(_PythonDecoratedOperator):
    """The TaskFlow operator of the steps that start Ray work: in ``ray_job`` mode its
    callable defers to a :class:`~tasks.airflow.triggers.RayJobTrigger`, and
    ``execute_complete`` runs the callable again with the trigger's event, which then
    reads the job's result instead of submitting."""

    def execute_complete(self, context: Any, event: Optional[Dict[str, Any]] = None,
                         **_kwargs: Any) -> Any:
        token = _RESUME.set(dict(event or {}, **_kwargs))
        try:
            return self.execute(context)
        finally:
            _RESUME.reset(token)


def _step_task(**kwargs: Any) -> Any:
    """``@task(...)`` for the deferrable steps."""
    return task_decorator_factory(decorated_operator_class=_StepOperator, **kwargs)


def _orchestrator_run_id() -> str:
    ti = get_current_context()["ti"]
    suffix = "" if ti.map_index is None or ti.map_index < 0 else f"/{ti.map_index}"
    return f"airflow:{ti.dag_id}/{ti.run_id}/{ti.task_id}{suffix}"


def _run_step(step: str, mode: Optional[str], **kwargs: Any) -> Any:
    """``tasks.<step>(**kwargs)`` here (``local``), or as a Ray job this task defers
    to (``ray_job``), returning the step's reference once the job ended."""
    from tasks import ray_jobs, steps

    if _call(ray_jobs.execution_mode, mode) == ray_jobs.LOCAL:
        return _call(getattr(steps, step), **kwargs)
    with ray_jobs.caller(address=ray_job_address(), on_log=logger.info,
                         run_id=_orchestrator_run_id(), token=ray_job_token()):
        job = _call(ray_jobs.plan, step, kwargs)
        event = _RESUME.get()
        rerun = bool(event) and event["status"] == "STOPPED" and _call(
            job.stopped_for_a_rerun, event["submission_id"], event.get("reattached_at"))
        if event and not rerun:
            return _call(job.outcome, event["submission_id"], event["status"])
        if rerun:  # cleared while it waited: this rerun runs the job's next attempt
            logger.warning("Ray job %s was stopped because its task was cleared; this "
                           "rerun submits the next attempt.", event["submission_id"])
        submission_id = job.submit_or_attach()
    from tasks.airflow.triggers import RayJobTrigger

    logger.info("Deferring while Ray job %s runs (the triggerer follows it).", submission_id)
    # The trigger is stored in the metadata database: it names the connection, and reads
    # the token from it in the triggerer. A re-attach is noted for the resume (see
    # StepJob.stopped_for_a_rerun).
    raise TaskDeferred(trigger=RayJobTrigger(job.address, submission_id, TRIGGER_POLL_S,
                                             conn_id=ray_conn_id()),
                       method_name="execute_complete",
                       kwargs={"reattached_at": job.reattached_at})


# --- tasks ------------------------------------------------------------------------------
@task(task_id="ingest", retries=RETRIES, multiple_outputs=False)
def ingest_task(source: Optional[str] = None, format: Optional[str] = None,
                storage: Optional[str] = None, name: Optional[str] = None,
                partition_filter: Optional[Dict[str, Any]] = None,
                window: Optional[Dict[str, Any]] = None, since: Any = None,
                until: Any = None, incremental: bool = False, sql: Optional[str] = None,
                table: Optional[str] = None, conn_id: Optional[str] = None,
                key: Optional[str] = None, readers: Optional[int] = None) -> Dict[str, Any]:
    """``tasks.ingest``; returns the ``DatasetRef`` as a dict. A ``window`` without
    an end ends at the DAG run's ``data_interval_end`` (else its logical date).

    A database: ``conn_id`` names an Airflow connection (its password stays in
    Airflow's secrets backend and the driver: not in XCom, params or logs); ingest its
    ``table`` or the query ``sql``."""
    from tasks import steps

    if window is not None and until is None and not (window or {}).get("until"):
        until = _logical_end()
        logger.info("Window %s ends at the run's data interval end %s.", window, until)
    connection = None
    if conn_id is not None:
        source, connection = connection_source(conn_id, table, sql)
    return _call(steps.ingest, source, format, storage=full_uri(storage), name=name,
                 partition_filter=partition_filter, window=window, since=since,
                 until=until, incremental=incremental, sql=sql, connection=connection,
                 key=key, readers=readers).to_dict()


def _logical_end() -> Any:
    ctx = get_current_context()
    return ctx.get("data_interval_end") or ctx.get("logical_date") or ctx.get("run_after")


@task(task_id="data_changed", retries=RETRIES, multiple_outputs=False)
def skip_if_unchanged_task(pipeline: str, train: Dict[str, Any], enabled: bool = False,
                           alias: str = DEFAULT_ALIAS,
                           storage: Optional[str] = None) -> bool:
    """With ``enabled``: skip (and so skip everything downstream) when the ``alias``
    model was trained on exactly this training data; otherwise pass."""
    from tasks.registry.aliases import production_trained_on

    if not enabled:
        return True
    production = _call(production_trained_on, pipeline, train, alias,
                       storage=full_uri(storage))
    if production is not None:
        raise AirflowSkipException(
            f"The data did not change: {pipeline}/{alias} ({production.uri}) was trained "
            f"on this training set (fingerprint {production.data_fingerprint[:16]}); "
            "nothing to retrain (skip_if_unchanged).")
    return True


@task(task_id="validate", retries=RETRIES, multiple_outputs=True)
def validate_task(dataset: Dict[str, Any], pipeline: Optional[str] = None,
                  schema: Optional[Dict[str, Any]] = None,
                  checks: Optional[Dict[str, Any]] = None,
                  storage: Optional[str] = None, enabled: bool = True) -> Dict[str, Any]:
    """``tasks.validate``: the report in the task log and in XCom (also per key:
    ``validate_task(...)["dataset"]`` is the data set to split). A failed check fails the
    task without retries, after pushing the report to XCom under ``validation``.
    ``enabled=False`` (a DAG param) passes the data set on unchecked."""
    from tasks.validation import ValidationReport, validate

    if not enabled:
        logger.warning("Validation is turned off for this run: the data is not checked.")
        return ValidationReport(dataset=dataset, passed=True,
                                warnings=["validation turned off"]).to_dict()
    report = _call(validate, dataset, schema, checks, pipeline=pipeline,
                   storage=full_uri(storage), raise_on_failure=False)
    for line in report.summary().splitlines():
        (logger.info if report.passed else logger.error)("%s", line)
    if not report.passed:
        get_current_context()["ti"].xcom_push(key="validation", value=report.to_dict())
        _call(report.raise_for_status)
    return report.to_dict()


@task(task_id="split", retries=RETRIES, multiple_outputs=True)
def split_task(dataset: Dict[str, Any], test_size: float = 0.2, seed: int = 0,
               stratify_column: Optional[str] = None) -> Dict[str, Any]:
    """``tasks.split``; ``{"train": ..., "validation": ...}`` (also pushed per key,
    so ``split_task(...)["validation"]`` works in a DAG)."""
    from tasks import steps

    out = _call(steps.split, dataset, test_size, seed, stratify_column)
    return {k: v.to_dict() for k, v in out.items()}


@_step_task(task_id="train", retries=RETRIES, multiple_outputs=False)
def train_task(pipeline: str, datasets: Dict[str, Any],
               scaling: Optional[Dict[str, Any]] = None,
               run: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``tasks.train``, resuming ``run_name_for(DAG run, task)`` on a retry; returns
    the ``CheckpointRef`` as a dict. Deferrable (``run["execution"] = "ray_job"``)."""
    run = _run_settings(run)
    return _run_step("train", run.get("execution"), pipeline=pipeline, datasets=datasets,
                     scaling=scaling, run=run).to_dict()


@_step_task(task_id="tune", retries=RETRIES, multiple_outputs=False)
def tune_task(pipeline: str, datasets: Dict[str, Any],
              param_space: Optional[Dict[str, Any]] = None,
              tune_config: Optional[Dict[str, Any]] = None,
              scaling: Optional[Dict[str, Any]] = None,
              run: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``tasks.tune`` (a retry resumes the experiment); returns the ``TuneRef``.
    Deferrable (``run["execution"] = "ray_job"``)."""
    run = _run_settings(run)
    return _run_step("tune", run.get("execution"), pipeline=pipeline, datasets=datasets,
                     param_space=param_space, tune_config=tune_config, scaling=scaling,
                     run=run).to_dict()


@_step_task(task_id="evaluate", retries=RETRIES, multiple_outputs=False)
def evaluate_task(checkpoint: Dict[str, Any], dataset: Dict[str, Any],
                  execution: Optional[str] = None,
                  runtime_env: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``tasks.evaluate``; the metrics (JSON values). Deferrable
    (``execution="ray_job"``)."""
    return _run_step("evaluate", execution, checkpoint=checkpoint, dataset=dataset,
                     execution=execution, runtime_env=runtime_env)


@task(task_id="promote", retries=RETRIES, multiple_outputs=False)
def promote_task(checkpoint: Dict[str, Any], metrics: Dict[str, Any],
                 alias: str = DEFAULT_ALIAS, gate: Optional[Dict[str, Any]] = None,
                 registry: Optional[str] = None,
                 dataset: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``tasks.promote``. Promoted: returns the ``Promotion`` and emits an event for
    each asset outlet, with the checkpoint in its ``extra``. Not promoted: the task is
    skipped (no asset event), the decision kept in the alias's history."""
    from tasks import steps

    decision = _call(steps.promote, checkpoint, metrics, alias, gate,
                     registry=full_uri(registry), dataset=dataset,
                     run_id=get_current_context()["run_id"])
    reasons = "; ".join(decision.reasons) or "no gate"
    if not decision.promoted:
        prev = decision.previous.uri if decision.previous else "nothing (never set)"
        # For the rejected notifier (on_skipped_callback): the gate's reasons as JSON.
        get_current_context()["ti"].xcom_push(key=REJECTION_XCOM_KEY, value={
            "checkpoint_uri": decision.checkpoint.uri, "pipeline": decision.pipeline,
            "alias": alias, "reasons": list(decision.reasons), "previous_uri":
            decision.previous.uri if decision.previous else None})
        raise AirflowSkipException(
            f"Not promoted: {decision.checkpoint.uri} failed the gate ({reasons}); "
            f"{decision.pipeline}/{alias} still points at {prev}. No asset event.")
    ctx = get_current_context()
    extra = {"checkpoint_uri": decision.checkpoint.uri, "pipeline": decision.pipeline,
             "alias": alias, "storage": decision.checkpoint.storage,
             "pointer_uri": decision.pointer_uri, "gate": reasons}
    for outlet in ctx["outlets"]:
        if isinstance(outlet, Asset):
            ctx["outlet_events"][outlet].extra = extra
    logger.info("Promoted %s as %s/%s (%s).", decision.checkpoint.uri, decision.pipeline,
                alias, reasons)
    return decision.to_dict()


@task(task_id="resolve_model", retries=RETRIES, multiple_outputs=False)
def resolve_model_task(pipeline: str, alias: str = DEFAULT_ALIAS,
                       storage: Optional[str] = None) -> Dict[str, Any]:
    """``tasks.resolve_alias``: the checkpoint ``alias`` points at now (the one the
    latest promotion set). Fails, without retries, if it was never set."""
    from tasks import steps

    for event in _triggering_events():
        logger.info("Triggered by an asset event of %s: %s", event.get("uri"),
                    event.get("extra"))
    ref = _call(steps.resolve_alias, pipeline, alias, storage=full_uri(storage))
    if ref is None:
        raise AirflowFailException(
            f"No {alias!r} model for pipeline {pipeline!r} under "
            f"{xcom_uri(storage) or 'the default storage'}: run the retrain_{pipeline} DAG "
            "first.")
    return ref.to_dict()


def _triggering_events() -> List[Dict[str, Any]]:
    """The asset events that triggered this DAG run, as dicts (none for manual runs)."""
    ctx = get_current_context()
    out = []
    try:
        for asset, events in ctx["triggering_asset_events"].items():
            for ev in events:
                out.append({"uri": getattr(asset, "uri", str(asset)),
                            "extra": dict(getattr(ev, "extra", None) or {})})
    except Exception as exc:  # information only: never fail scoring over it
        logger.warning("Could not read the triggering asset events: %s", exc)
    return out


@_step_task(task_id="batch_predict", retries=RETRIES, multiple_outputs=False)
def batch_predict_task(checkpoint: Dict[str, Any], dataset: Dict[str, Any],
                       output: Optional[str] = None, num_workers: int = 1,
                       keep_columns: Optional[List[str]] = None,
                       execution: Optional[str] = None,
                       runtime_env: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``tasks.batch_predict``; returns the predictions' ``DatasetRef``. Deferrable
    (``execution="ray_job"``)."""
    return _run_step("batch_predict", execution, checkpoint=checkpoint, dataset=dataset,
                     output=full_uri(output), num_workers=num_workers,
                     keep_columns=keep_columns, execution=execution,
                     runtime_env=runtime_env).to_dict()


__all__ = ["ingest_task", "validate_task", "skip_if_unchanged_task", "split_task", "train_task",
           "tune_task", "evaluate_task", "promote_task", "resolve_model_task",
           "batch_predict_task", "RETRIES", "TRIGGER_POLL_S"]
