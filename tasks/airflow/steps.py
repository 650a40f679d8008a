"""Airflow 3 TaskFlow tasks: the steps of ``tasks.core``, references through XCom as JSON.

    from airflow.sdk import dag
    from tasks.airflow_tasks import ingest_task, split_task, train_task

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
``batch_predict`` submit their step as a Ray job (``tasks._jobs``) and **defer** to
:class:`tasks.airflow_triggers.RayJobTrigger`: no worker slot is held while the job runs,
the triggerer tails the job's log into the task's log, and the task resumes to read the
reference back. The job server's address comes from the Airflow connection
``trainyard_ray`` (``$TRAINYARD_RAY_CONN_ID``; conn type ``ray`` or ``http``, host and
port of the dashboard), else ``$TRAINYARD_RAY_JOB_ADDRESS`` or an http(s)://
``$RAY_ADDRESS``. A retried task re-attaches to its job; killing the deferred task stops
it.

Importing this module imports Airflow's task SDK and nothing heavy: ``tasks.core``,
Ray and the frameworks are imported inside the task bodies, so DAG files parse fast.
Only wrapping lives here; every step's logic is in ``tasks.core``.
"""

from __future__ import annotations

import logging
import os
from contextvars import ContextVar
from typing import Any, Callable, Dict, List, Optional

from airflow.providers.standard.decorators.python import _PythonDecoratedOperator
from airflow.sdk import Asset, BaseNotifier, get_current_context, task
from airflow.sdk.bases.decorator import task_decorator_factory
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, TaskDeferred

from engine import constants

logger = logging.getLogger("tasks.airflow")

#: Task retries (a retried ``train`` or ``tune`` resumes, so a retry is cheap).
RETRIES = 2
#: The alias the retrain DAGs promote and the batch-predict DAGs score with.
DEFAULT_ALIAS = "production"
#: Which pipelines get a retrain and a batch-predict DAG (comma-separated names; unset
#: or empty: every pipeline discovery finds).
PIPELINES_ENV_VAR = constants.AIRFLOW_PIPELINES_ENV_VAR
#: The retrain DAGs' cron schedule.
SCHEDULE_ENV_VAR = constants.RETRAIN_SCHEDULE_ENV_VAR
DEFAULT_SCHEDULE = "0 3 * * 1"  # Mondays 03:00 UTC, as deploy/prefect.yaml
#: The Airflow connection the notifiers post to (its URL: ``http(s)://host:port/path``).
WEBHOOK_CONN_ENV_VAR = constants.AIRFLOW_WEBHOOK_CONN_ENV_VAR
DEFAULT_WEBHOOK_CONN_ID = constants.SETTINGS[WEBHOOK_CONN_ENV_VAR].default
#: The XCom key under which ``promote_task`` keeps a rejection's gate reasons.
REJECTION_XCOM_KEY = "rejection"
ASSET_URI_SCHEME = "trainyard"
#: The Airflow connection of the Ray job server (execution="ray_job").
RAY_CONN_ID_ENV_VAR = constants.RAY_CONN_ID_ENV_VAR
DEFAULT_RAY_CONN_ID = "trainyard_ray"
#: Seconds between the trigger's polls of a deferred task's Ray job.
TRIGGER_POLL_S = 2.0


# --- DAG-file helpers (cheap: called at parse time) -------------------------------------
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
    value = os.environ.get(PIPELINES_ENV_VAR, "").strip()
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
    value = os.environ.get(SCHEDULE_ENV_VAR, DEFAULT_SCHEDULE).strip()
    return None if value.lower() in ("", "none") else value


def failure_notifier() -> "WebhookNotifier":
    """The DAGs' ``on_failure_callback`` (in ``default_args``: every task's, so a task
    whose retries are spent posts once)."""
    return WebhookNotifier(event="failed")


def rejection_notifier() -> "WebhookNotifier":
    """``promote_task``'s ``on_skipped_callback``: posts the gate's reasons."""
    return WebhookNotifier(event="rejected")


# --- notifications ----------------------------------------------------------------------
class WebhookNotifier(BaseNotifier):
    """Posts a JSON message to the URL of an Airflow connection, and logs it.

    ``event="failed"`` for ``on_failure_callback`` (a task failed for good: its retries
    are spent), ``event="rejected"`` for ``promote_task``'s ``on_skipped_callback`` (the
    candidate failed the gate; the message carries the gate's reasons). The connection
    is ``conn_id``, by default ``$TRAINYARD_AIRFLOW_WEBHOOK_CONN_ID`` or
    ``trainyard_webhook`` (e.g. ``AIRFLOW_CONN_TRAINYARD_WEBHOOK=https://hooks.example/
    x``); none configured, the message is only logged. A webhook that is down or answers
    an error is logged as a warning: a notification never fails the pipeline.

    The JSON body: ``event``, ``dag_id``, ``run_id``, ``task_id``, ``try_number``,
    ``message`` (``error`` for failures, ``reasons`` and ``checkpoint_uri`` for
    rejections).
    """

    template_fields = ("conn_id",)

    def __init__(self, event: str = "failed", conn_id: Optional[str] = None,
                 timeout_s: float = 10.0) -> None:
        super().__init__()
        if event not in ("failed", "rejected"):
            raise ValueError(f"WebhookNotifier(event={event!r}): use 'failed' or 'rejected'")
        self.event, self.conn_id, self.timeout_s = event, conn_id, timeout_s

    def notify(self, context: Any) -> None:
        payload = _notification(self.event, context)
        (logger.error if self.event == "failed" else logger.warning)(
            "trainyard %s: %s", self.event, payload["message"])
        conn_id = self.conn_id or os.environ.get(WEBHOOK_CONN_ENV_VAR) \
            or DEFAULT_WEBHOOK_CONN_ID
        url = _webhook_url(conn_id)
        if url is None:
            logger.info("No Airflow connection %r: the %s notification is only logged.",
                        conn_id, self.event)
            return
        try:
            _post_json(url, payload, self.timeout_s)
            logger.info("Posted the %s notification to connection %r.", self.event, conn_id)
        except Exception as exc:  # never fail (or retry) a task over its notification
            logger.warning("Could not post the %s notification to connection %r: %s",
                           self.event, conn_id, exc)


def _webhook_url(conn_id: str) -> Optional[str]:
    """The URL of connection ``conn_id`` (its ``extra`` ``{"url": ...}`` or its URI), or
    None when there is no such connection."""
    from airflow.sdk import Connection

    try:
        conn = Connection.get(conn_id)
    except Exception:  # AirflowNotFoundException and the like: not configured
        return None
    url = (conn.extra_dejson or {}).get("url")
    if url:
        return url
    scheme = conn.conn_type if conn.conn_type in ("http", "https") else "http"
    host = conn.host or ""
    if "://" in host:
        return host
    port = f":{conn.port}" if conn.port else ""
    path = f"/{conn.schema}" if conn.schema else ""
    return f"{scheme}://{host}{port}{path}"


def _post_json(url: str, payload: Dict[str, Any], timeout_s: float) -> None:
    import json
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(payload, default=str).encode(),
                                     headers={"Content-Type": "application/json"},
                                     method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        response.read()


def _notification(event: str, context: Any) -> Dict[str, Any]:
    """The JSON message of ``event`` for the task instance in ``context``."""
    ti = context.get("ti") or context.get("task_instance")
    out: Dict[str, Any] = {
        "event": event, "dag_id": getattr(ti, "dag_id", None),
        "run_id": context.get("run_id") or getattr(ti, "run_id", None),
        "task_id": getattr(ti, "task_id", None),
        "try_number": getattr(ti, "try_number", None)}
    if event == "rejected":
        rejection = None
        try:
            rejection = ti.xcom_pull(task_ids=ti.task_id, key=REJECTION_XCOM_KEY)
        except Exception as exc:
            logger.warning("Could not read the gate's reasons from XCom: %s", exc)
        rejection = rejection or {"reasons": [str(context.get("exception") or "")]}
        out.update(rejection)
        out["message"] = (f"{out['dag_id']}: the candidate {rejection.get('checkpoint_uri')}"
                          f" failed the gate: {'; '.join(rejection['reasons'])}")
    else:
        out["error"] = str(context.get("exception") or "")
        out["message"] = (f"{out['dag_id']}.{out['task_id']} failed for good (try "
                          f"{out['try_number']}) in run {out['run_id']}: {out['error']}")
    return out


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


def xcom_uri(uri: Optional[str]) -> Optional[str]:
    """``uri`` as it may go into XCom: without credentials or an endpoint query (XCom is
    stored in the metadata database and shown in the UI). Tasks that receive it get the
    full URI back from :func:`full_uri`."""
    from engine.storage import redact

    return redact(uri) if isinstance(uri, str) else uri


def full_uri(uri: Optional[str]) -> Optional[str]:
    """The URI to open for one that came through XCom (:func:`xcom_uri`): when it is, or
    is under, the DAG run's ``storage``/``output`` param or ``$TRAINYARD_STORAGE_PATH``,
    that one with its credentials and endpoint; otherwise ``uri`` as it is."""
    from engine import constants
    from engine.storage import redact
    from tasks._store import sub

    if not isinstance(uri, str) or "://" not in uri or "?" in uri or "@" in uri:
        return uri
    try:
        params = dict(get_current_context().get("params") or {})
    except Exception:  # called outside a running task
        params = {}
    candidates = [params.get("storage"), params.get("output"),
                  os.environ.get(constants.STORAGE_PATH_ENV_VAR)]
    for full in candidates:
        if not isinstance(full, str) or "://" not in full:
            continue
        shown = redact(full).rstrip("/")
        if uri.rstrip("/") == shown:
            return full
        if uri.startswith(shown + "/"):
            return sub(full, uri[len(shown) + 1:])
    return uri


def _run_settings(run: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """``run`` with a name derived from the DAG run and this task, unless it has one, and
    its storage with the credentials XCom does not hold."""
    from tasks import core

    out = dict(run or {})
    if out.get("storage"):
        out["storage"] = full_uri(out["storage"])
    if not out.get("name"):
        ctx = get_current_context()
        ti = ctx["ti"]
        name = ti.task_id if (ti.map_index is None or ti.map_index < 0) \
            else f"{ti.task_id}-{ti.map_index}"
        out["name"] = core.run_name_for(ctx["run_id"], name, prefix=ti.dag_id)
        logger.info("Engine run %r (a retry of this task resumes it).", out["name"])
    return out


# --- steps that may run as Ray jobs (deferrable) ---------------------------------------
# The trigger's event while the task resumes (see _StepOperator.execute_complete).
_RESUME: ContextVar[Optional[Dict[str, Any]]] = ContextVar("trainyard_resume", default=None)


class _StepOperator(_PythonDecoratedOperator):
    """The TaskFlow operator of the steps that start Ray work: in ``ray_job`` mode its
    callable defers to a :class:`~tasks.airflow_triggers.RayJobTrigger`, and
    ``execute_complete`` runs the callable again with the trigger's event, which then
    reads the job's result instead of submitting."""

    def execute_complete(self, context: Any, event: Optional[Dict[str, Any]] = None,
                         **_kwargs: Any) -> Any:
        token = _RESUME.set(dict(event or {}))
        try:
            return self.execute(context)
        finally:
            _RESUME.reset(token)


def _step_task(**kwargs: Any) -> Any:
    """``@task(...)`` for the deferrable steps."""
    return task_decorator_factory(decorated_operator_class=_StepOperator, **kwargs)


def ray_job_address() -> Optional[str]:
    """The job server from the Airflow connection ``$TRAINYARD_RAY_CONN_ID`` (default
    ``trainyard_ray``: conn type ``ray`` or ``http``, host and port of the dashboard),
    or None when there is no such connection."""
    from airflow.sdk import Connection

    try:
        conn = Connection.get(os.environ.get(RAY_CONN_ID_ENV_VAR, DEFAULT_RAY_CONN_ID))
    except Exception:  # AirflowNotFoundException: use the environment variables
        return None
    host = conn.host or ""
    if "://" not in host:
        scheme = "https" if (conn.conn_type == "https" or conn.schema == "https") else "http"
        host = f"{scheme}://{host}"
    return f"{host.rstrip('/')}:{conn.port}" if conn.port else host.rstrip("/")


def _orchestrator_run_id() -> str:
    ti = get_current_context()["ti"]
    suffix = "" if ti.map_index is None or ti.map_index < 0 else f"/{ti.map_index}"
    return f"airflow:{ti.dag_id}/{ti.run_id}/{ti.task_id}{suffix}"


def _run_step(step: str, mode: Optional[str], **kwargs: Any) -> Any:
    """``tasks.core.<step>(**kwargs)`` here (``local``), or as a Ray job this task defers
    to (``ray_job``), returning the step's reference once the job ended."""
    from tasks import _jobs, core

    if _call(_jobs.execution_mode, mode) == _jobs.LOCAL:
        return _call(getattr(core, step), **kwargs)
    with _jobs.caller(address=ray_job_address(), on_log=logger.info,
                      run_id=_orchestrator_run_id()):
        job = _call(_jobs.plan, step, kwargs)
        event = _RESUME.get()
        if event:
            return _call(job.outcome, event["submission_id"], event["status"])
        submission_id = job.submit_or_attach()
    from tasks.airflow_triggers import RayJobTrigger

    logger.info("Deferring while Ray job %s runs (the triggerer follows it).", submission_id)
    raise TaskDeferred(trigger=RayJobTrigger(job.address, submission_id, TRIGGER_POLL_S),
                       method_name="execute_complete")


# --- tasks ------------------------------------------------------------------------------
@task(task_id="ingest", retries=RETRIES, multiple_outputs=False)
def ingest_task(source: Optional[str] = None, format: Optional[str] = None,
                storage: Optional[str] = None, name: Optional[str] = None,
                partition_filter: Optional[Dict[str, Any]] = None,
                window: Optional[Dict[str, Any]] = None, since: Any = None,
                until: Any = None, incremental: bool = False, sql: Optional[str] = None,
                table: Optional[str] = None, conn_id: Optional[str] = None,
                key: Optional[str] = None, readers: Optional[int] = None) -> Dict[str, Any]:
    """``tasks.core.ingest``; returns the ``DatasetRef`` as a dict. A ``window`` without
    an end ends at the DAG run's ``data_interval_end`` (else its logical date).

    A database: ``conn_id`` names an Airflow connection (its password stays in
    Airflow's secrets backend and the driver: not in XCom, params or logs); ingest its
    ``table`` or the query ``sql``."""
    from tasks import core

    if window is not None and until is None and not (window or {}).get("until"):
        until = _logical_end()
        logger.info("Window %s ends at the run's data interval end %s.", window, until)
    connection = None
    if conn_id is not None:
        source, connection = _connection_source(conn_id, table, sql)
    return _call(core.ingest, source, format, storage=full_uri(storage), name=name,
                 partition_filter=partition_filter, window=window, since=since,
                 until=until, incremental=incremental, sql=sql, connection=connection,
                 key=key, readers=readers).to_dict()


def _connection_source(conn_id: str, table: Optional[str], sql: Optional[str]) -> tuple:
    """``(source, connection)`` of ``ingest`` for an Airflow connection."""
    from airflow.sdk import Connection

    from engine.exceptions import ConfigError
    from tasks._sql import with_table

    url = Connection.get(conn_id).get_uri()
    if sql is not None:
        return None, url
    if not table:
        raise AirflowFailException(f"ingest_task(conn_id={conn_id!r}) needs table=... or "
                                   "sql=...")
    try:
        return with_table(url, table), None
    except ConfigError as exc:
        raise AirflowFailException(f"Airflow connection {conn_id!r}: {exc}") from None


def _logical_end() -> Any:
    ctx = get_current_context()
    return ctx.get("data_interval_end") or ctx.get("logical_date") or ctx.get("run_after")


@task(task_id="data_changed", retries=RETRIES, multiple_outputs=False)
def skip_if_unchanged_task(pipeline: str, train: Dict[str, Any], enabled: bool = False,
                           alias: str = DEFAULT_ALIAS,
                           storage: Optional[str] = None) -> bool:
    """With ``enabled``: skip (and so skip everything downstream) when the ``alias``
    model was trained on exactly this training data; otherwise pass."""
    from tasks._sources import production_trained_on

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
    """``tasks.validate.validate``: the report in the task log and in XCom (also per key:
    ``validate_task(...)["dataset"]`` is the data set to split). A failed check fails the
    task without retries, after pushing the report to XCom under ``validation``.
    ``enabled=False`` (a DAG param) passes the data set on unchecked."""
    from tasks.validate import ValidationReport, validate

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
    """``tasks.core.split``; ``{"train": ..., "validation": ...}`` (also pushed per key,
    so ``split_task(...)["validation"]`` works in a DAG)."""
    from tasks import core

    out = _call(core.split, dataset, test_size, seed, stratify_column)
    return {k: v.to_dict() for k, v in out.items()}


@_step_task(task_id="train", retries=RETRIES, multiple_outputs=False)
def train_task(pipeline: str, datasets: Dict[str, Any],
               scaling: Optional[Dict[str, Any]] = None,
               run: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``tasks.core.train``, resuming ``run_name_for(DAG run, task)`` on a retry; returns
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
    """``tasks.core.tune`` (a retry resumes the experiment); returns the ``TuneRef``.
    Deferrable (``run["execution"] = "ray_job"``)."""
    run = _run_settings(run)
    return _run_step("tune", run.get("execution"), pipeline=pipeline, datasets=datasets,
                     param_space=param_space, tune_config=tune_config, scaling=scaling,
                     run=run).to_dict()


@_step_task(task_id="evaluate", retries=RETRIES, multiple_outputs=False)
def evaluate_task(checkpoint: Dict[str, Any], dataset: Dict[str, Any],
                  execution: Optional[str] = None,
                  runtime_env: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``tasks.core.evaluate``; the metrics (JSON values). Deferrable
    (``execution="ray_job"``)."""
    return _run_step("evaluate", execution, checkpoint=checkpoint, dataset=dataset,
                     execution=execution, runtime_env=runtime_env)


@task(task_id="promote", retries=RETRIES, multiple_outputs=False)
def promote_task(checkpoint: Dict[str, Any], metrics: Dict[str, Any],
                 alias: str = DEFAULT_ALIAS, gate: Optional[Dict[str, Any]] = None,
                 registry: Optional[str] = None,
                 dataset: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``tasks.core.promote``. Promoted: returns the ``Promotion`` and emits an event for
    each asset outlet, with the checkpoint in its ``extra``. Not promoted: the task is
    skipped (no asset event), the decision kept in the alias's history."""
    from tasks import core

    decision = _call(core.promote, checkpoint, metrics, alias, gate,
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
    """``tasks.core.resolve_alias``: the checkpoint ``alias`` points at now (the one the
    latest promotion set). Fails, without retries, if it was never set."""
    from tasks import core

    for event in _triggering_events():
        logger.info("Triggered by an asset event of %s: %s", event.get("uri"),
                    event.get("extra"))
    ref = _call(core.resolve_alias, pipeline, alias, storage=full_uri(storage))
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
    """``tasks.core.batch_predict``; returns the predictions' ``DatasetRef``. Deferrable
    (``execution="ray_job"``)."""
    return _run_step("batch_predict", execution, checkpoint=checkpoint, dataset=dataset,
                     output=full_uri(output), num_workers=num_workers,
                     keep_columns=keep_columns, execution=execution,
                     runtime_env=runtime_env).to_dict()


__all__ = ["ingest_task", "validate_task", "skip_if_unchanged_task", "split_task", "train_task", "tune_task", "evaluate_task",
           "promote_task", "resolve_model_task", "batch_predict_task", "model_asset",
           "WebhookNotifier", "DEFAULT_WEBHOOK_CONN_ID", "WEBHOOK_CONN_ENV_VAR",
           "dag_pipelines", "retrain_schedule", "failure_notifier", "rejection_notifier", "xcom_uri", "full_uri", "RETRIES", "DEFAULT_ALIAS",
           "PIPELINES_ENV_VAR", "SCHEDULE_ENV_VAR", "RAY_CONN_ID_ENV_VAR", "ray_job_address"]
