"""Prefect 3 tasks: the steps of ``tasks.steps`` with retries, JSON results and artifacts.

    from prefect import flow
    from tasks.prefect import ingest_task, split_task, train_task

    @flow
    def my_flow():
        data = ingest_task("sklearn:digits")
        splits = split_task(data, 0.2, 0, "target")
        return train_task("digits", splits, {"num_workers": 2})

Each task returns a reference (``tasks.refs``) persisted with Prefect's JSON serializer,
so results stay small and readable and survive a restart of the flow run. ``train`` and
``tune`` name their engine run ``run_name_for(<flow run id>, <task call>)`` unless
``run["name"]`` is given, where the task call is the task's name and a digest of its
inputs (``train-1a2b3c4d``, see :func:`call_name`): two calls with different configs in
one flow run train two runs, and a retried task (or a retried flow run) resumes that
call's run from its latest committed checkpoint. With ``execution="ray_job"`` (``run["execution"]``,
the ``execution`` argument, or ``$TRAINYARD_EXECUTION``) the step runs as a Ray job that a
retry re-attaches to (``tasks.ray_jobs``); its log streams into the task run's log, and a
cancelled flow run stops it. Errors a retry cannot fix (bad configuration, unknown
pipeline, malformed references) fail the task at once; other errors are retried.

Only wrapping lives here; every step's logic is in ``tasks.steps``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Dict, List, Mapping, Optional

from prefect import task
from prefect.artifacts import (create_link_artifact, create_markdown_artifact,
                               create_table_artifact)

from engine.exceptions import ConfigError
from pipelines import UnknownPipelineError
from tasks import ray_jobs, steps
from tasks.prefect.events import emit_decision_event, notify_rejection
from tasks.refs import CheckpointRef, DatasetRef, Promotion, RefError, TuneRef
from tasks.validation import ValidationReport, markdown, validate

#: Task retries and the pause before each (tasks resume, so a retry is cheap).
RETRIES = 2
RETRY_DELAY_S = 10.0
_NOT_RETRIED = (ConfigError, RefError, UnknownPipelineError, ImportError, TypeError)


def retry_unless_config_error(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry anything but errors in the inputs."""
    exc = state.data if isinstance(state.data, BaseException) else None
    if exc is None:
        try:
            exc = state.result(raise_on_failure=False)
        except Exception:  # an unreadable result: let the retry policy decide
            return True
    return not isinstance(exc, _NOT_RETRIED)


_TASK_OPTIONS: Dict[str, Any] = dict(
    retries=RETRIES, retry_delay_seconds=RETRY_DELAY_S,
    retry_condition_fn=retry_unless_config_error,
    persist_result=True, result_serializer="json")


# --- helpers ----------------------------------------------------------------------------
def _key(*parts: str) -> str:
    """A Prefect artifact key: lower-case letters, digits and dashes."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())).strip("-")


def _link(uri: str) -> str:
    return uri if "://" in uri else f"file://{uri}"


def call_name(task_name: str, pipeline: str, datasets: Mapping[str, Any],
              scaling: Optional[Mapping[str, Any]], run: Optional[Mapping[str, Any]],
              *extra: Any) -> str:
    """This task call's identity within its flow run: the task's name and a digest of
    what the call computes (pipeline, data fingerprints, scaling, hyperparameters, and
    ``extra`` such as a search space).

    Two calls with different configs in one flow run (a loop, ``.map``) get two names,
    hence two engine runs; a retry of a call, in process or by a retried flow run, has
    the same inputs, hence finds its own run again and resumes it. (Prefect 3 draws the
    dynamic key of a task called in a flow at random, so it identifies a task run and
    its in-process retries but not the same call in a retried flow run.) Calls with
    equal inputs share a run, as Prefect's own input cache would share their result.
    """
    data = {k: DatasetRef.from_dict(v).fingerprint for k, v in dict(datasets).items()}
    payload = json.dumps([pipeline, data, scaling, dict(run or {}).get("config"),
                          list(extra)], sort_keys=True, default=str)
    return f"{task_name}-{hashlib.sha256(payload.encode()).hexdigest()[:8]}"


def _run_settings(run: Optional[Mapping[str, Any]], pipeline: str, datasets: Any,
                  scaling: Any, *extra: Any) -> Dict[str, Any]:
    """``run`` with a name derived from the flow run and this task call (see
    :func:`call_name`), unless it has one."""
    from prefect.runtime import flow_run, task_run

    out = dict(run or {})
    if not out.get("name"):
        run_id = flow_run.id
        if run_id:
            call = call_name(task_run.task_name or "train", pipeline, datasets, scaling,
                             run, *extra)
            out["name"] = steps.run_name_for(run_id, call, prefix=pipeline)
    return out


def _block_source(block: str, table: Optional[str],
                  sql: Optional[str]) -> tuple:
    """``(source, connection)`` of ``ingest`` for a database URL kept in a Secret block."""
    from prefect.blocks.system import Secret

    from tasks.sources.sql import with_table

    url = Secret.load(block).get()
    if sql is not None:
        return None, url
    if not table:
        raise ConfigError(f"ingest_task(block={block!r}) needs table=... or sql=...")
    return with_table(url, table), None


def _scheduled_time() -> Any:
    """The flow run's scheduled start time (None outside a flow run: ingest uses now)."""
    from prefect.runtime import flow_run

    return flow_run.scheduled_start_time if flow_run.id else None


def _job_caller() -> Any:
    """In ``ray_job`` mode: the job's log goes to this task run's log, and the flow run
    is named as the run lease's owner. (A cancelled flow run interrupts the wait with
    Prefect's TerminationSignal, which stops the job.)"""
    from prefect import get_run_logger
    from prefect.runtime import flow_run

    log = get_run_logger()
    return ray_jobs.caller(on_log=log.info,
                           run_id=f"prefect:{flow_run.id}" if flow_run.id else None,
                           token=_ray_token())


def _ray_token() -> Optional[str]:
    """The Ray cluster's token from the Secret block ``$TRAINYARD_PREFECT_RAY_TOKEN_BLOCK``
    (None when unset: Ray's own token sources are read then). The block's value is a
    secret in Prefect (never in a flow's parameters, logs or results)."""
    from engine import constants

    block = constants.get(constants.PREFECT_RAY_TOKEN_BLOCK_ENV_VAR)
    if not block:
        return None
    from prefect.blocks.system import Secret

    try:
        return str(Secret.load(block).get()).strip() or None
    except ValueError as exc:  # no such block
        raise ConfigError(f"${constants.PREFECT_RAY_TOKEN_BLOCK_ENV_VAR} names the Secret "
                          f"block {block!r}, which cannot be loaded ({exc}): create it with "
                          "Secret(value=<the cluster's token>).save(...) or unset the "
                          "variable.") from None


def _metrics_table(metrics: Mapping[str, Any]) -> List[Dict[str, Any]]:
    return [{"metric": k, "value": v} for k, v in sorted(metrics.items())
            if isinstance(v, (int, float, str, bool)) or v is None]


# --- tasks ------------------------------------------------------------------------------
@task(name="ingest", **_TASK_OPTIONS)
def ingest_task(source: Optional[str] = None, format: Optional[str] = None,
                storage: Optional[str] = None, name: Optional[str] = None,
                partition_filter: Optional[Dict[str, Any]] = None,
                window: Optional[Dict[str, Any]] = None, since: Any = None,
                until: Any = None, incremental: bool = False, sql: Optional[str] = None,
                table: Optional[str] = None, block: Optional[str] = None,
                key: Optional[str] = None, readers: Optional[int] = None) -> DatasetRef:
    """``tasks.steps.ingest`` (a table artifact describes the data set). A ``window``
    without an end ends at the flow run's scheduled start time (its logical date).

    A database: ``block`` names a Prefect ``Secret`` block that holds its URL (with the
    password, which then never appears in the flow's parameters, results, artifacts or
    logs); ingest its ``table`` or the query ``sql``."""
    if window is not None and until is None and not (window or {}).get("until"):
        until = _scheduled_time()
    connection = None
    if block is not None:
        source, connection = _block_source(block, table, sql)
    ref = steps.ingest(source, format, storage=storage, name=name,
                      partition_filter=partition_filter, window=window, since=since,
                      until=until, incremental=incremental, sql=sql, connection=connection,
                      key=key, readers=readers)
    create_table_artifact(
        key=_key("dataset", ref.name), description=f"Ingested `{source}`",
        table=[{"name": ref.name, "rows": ref.num_rows, "columns": len(ref.schema),
                "fingerprint": ref.fingerprint[:16], "uri": ref.uri}])
    return ref


@task(name="validate", **_TASK_OPTIONS)
def validate_task(dataset: DatasetRef, pipeline: Optional[str] = None,
                  schema: Optional[Dict[str, Any]] = None,
                  checks: Optional[Dict[str, Any]] = None,
                  storage: Optional[str] = None) -> ValidationReport:
    """``tasks.validate``; the report is a Markdown artifact, written before a
    failed check fails the task (not retried: the same data fails the same way)."""
    report = validate(dataset, schema, checks, pipeline=pipeline, storage=storage,
                      raise_on_failure=False)
    create_markdown_artifact(
        key=_key(pipeline or report.dataset.name or "data", "validation"),
        markdown=markdown(report),
        description=f"Validation of `{report.dataset.uri}`: "
                    f"{'passed' if report.passed else 'FAILED'}")
    report.raise_for_status()
    return report


@task(name="split", **_TASK_OPTIONS)
def split_task(dataset: DatasetRef, test_size: float = 0.2, seed: int = 0,
               stratify_column: Optional[str] = None) -> Dict[str, DatasetRef]:
    """``tasks.steps.split``."""
    out = steps.split(dataset, test_size, seed, stratify_column)
    create_table_artifact(
        key=_key("split", out["train"].name), description="Train/validation split",
        table=[{"part": k, "rows": v.num_rows, "fingerprint": v.fingerprint[:16],
                "uri": v.uri} for k, v in out.items()])
    return out


@task(name="train", **_TASK_OPTIONS)
def train_task(pipeline: str, datasets: Dict[str, DatasetRef],
               scaling: Optional[Dict[str, Any]] = None,
               run: Optional[Dict[str, Any]] = None) -> CheckpointRef:
    """``tasks.steps.train``, resuming ``run_name_for(flow run, task)`` on a retry;
    artifacts: the metrics table and a link to the checkpoint."""
    with _job_caller():
        ref = steps.train(pipeline, datasets, scaling,
                         _run_settings(run, pipeline, datasets, scaling))
    _checkpoint_artifacts(ref, "train")
    return ref


@task(name="tune", **_TASK_OPTIONS)
def tune_task(pipeline: str, datasets: Dict[str, DatasetRef],
              param_space: Optional[Dict[str, Any]] = None,
              tune_config: Optional[Dict[str, Any]] = None,
              scaling: Optional[Dict[str, Any]] = None,
              run: Optional[Dict[str, Any]] = None) -> TuneRef:
    """``tasks.steps.tune``; artifacts: the trials table, the best checkpoint."""
    with _job_caller():
        ref = steps.tune(pipeline, datasets, param_space, tune_config, scaling=scaling,
                        run=_run_settings(run, pipeline, datasets, scaling, param_space,
                                          tune_config))
    create_table_artifact(
        key=_key(pipeline, "tune-trials"), table=ref.trials,
        description=f"Trials of `{ref.experiment_uri}` ({ref.metric}, {ref.mode}); "
                    f"best config: `{ref.best_config}`")
    _checkpoint_artifacts(ref.best, "tune-best")
    return ref


def _checkpoint_artifacts(ref: CheckpointRef, step: str) -> None:
    pipeline = ref.pipeline or ref.framework
    create_table_artifact(key=_key(pipeline, step, "metrics"),
                          table=_metrics_table(ref.metrics),
                          description=f"Metrics of run `{ref.run_name}`")
    create_link_artifact(key=_key(pipeline, step, "checkpoint"), link=_link(ref.uri),
                         link_text=ref.uri, description=f"Checkpoint of run `{ref.run_name}`")


@task(name="evaluate", **_TASK_OPTIONS)
def evaluate_task(checkpoint: CheckpointRef, dataset: DatasetRef,
                  execution: Optional[str] = None,
                  runtime_env: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``tasks.steps.evaluate``; artifacts: the metrics table, the confusion matrix."""
    with _job_caller():
        metrics = steps.evaluate(checkpoint, dataset, execution=execution,
                                runtime_env=runtime_env)
    pipeline = CheckpointRef.from_dict(checkpoint).pipeline or "model"
    create_table_artifact(key=_key(pipeline, "evaluation"), table=_metrics_table(metrics),
                          description=f"Evaluation on `{DatasetRef.from_dict(dataset).uri}`")
    if metrics.get("confusion_matrix_path"):
        create_link_artifact(key=_key(pipeline, "confusion-matrix"),
                             link=_link(metrics["confusion_matrix_path"]),
                             link_text="confusion_matrix.png")
    return metrics


@task(name="promote", **_TASK_OPTIONS)
def promote_task(checkpoint: CheckpointRef, metrics: Dict[str, Any],
                 alias: str = "production", gate: Optional[Dict[str, Any]] = None,
                 registry: Optional[str] = None,
                 dataset: Optional[DatasetRef] = None) -> Promotion:
    """``tasks.steps.promote`` (``dataset``: the validation data, on which a champion
    gate re-evaluates the current model); a Markdown artifact records the decision."""
    from prefect.runtime import flow_run

    decision = steps.promote(checkpoint, metrics, alias, gate, registry=registry,
                            dataset=dataset, run_id=flow_run.id)
    lines = [f"**{'Promoted' if decision.promoted else 'Not promoted'}** "
             f"`{decision.checkpoint.uri}` as `{decision.pipeline}/{alias}`.", ""]
    lines += [f"- {r}" for r in decision.reasons] or ["- no gate"]
    if not decision.promoted:
        prev = decision.previous.uri if decision.previous else "nothing (never set)"
        lines += ["", f"`{alias}` still points at {prev}."]
    create_markdown_artifact(key=_key(decision.pipeline, alias, "promotion"),
                             markdown="\n".join(lines))
    emit_decision_event(decision, metrics)
    if not decision.promoted:
        notify_rejection(decision, metrics)
    return decision


@task(name="batch_predict", **_TASK_OPTIONS)
def batch_predict_task(checkpoint: CheckpointRef, dataset: DatasetRef,
                       output: Optional[str] = None, num_workers: int = 1,
                       keep_columns: Optional[List[str]] = None,
                       execution: Optional[str] = None,
                       runtime_env: Optional[Dict[str, Any]] = None) -> DatasetRef:
    """``tasks.batch_predict``; artifacts: a table and a link to the output."""
    with _job_caller():
        ref = steps.batch_predict(checkpoint, dataset, output, num_workers=num_workers,
                                 keep_columns=keep_columns, execution=execution,
                                 runtime_env=runtime_env)
    pipeline = CheckpointRef.from_dict(checkpoint).pipeline or "model"
    create_table_artifact(key=_key(pipeline, "predictions"),
                          table=[{"rows": ref.num_rows, "columns": ", ".join(ref.schema),
                                  "uri": ref.uri}],
                          description=f"Scored with `{CheckpointRef.from_dict(checkpoint).uri}`")
    create_link_artifact(key=_key(pipeline, "predictions-uri"), link=_link(ref.uri),
                         link_text=ref.uri)
    return ref


@task(name="report", **_TASK_OPTIONS)
def report_task(directory: str, summary: Dict[str, Any], checkpoint: CheckpointRef,
                metrics: Dict[str, Any], tuned: Optional[TuneRef] = None) -> str:
    """``tasks.report.write_report``; the report is also a Markdown artifact."""
    from tasks import report

    uri = report.write_report(directory, summary, checkpoint, metrics, tuned)
    create_markdown_artifact(
        key=_key(str(summary.get("pipeline", "model")), "run-report"),
        markdown=f"Report: `{uri}`\n\n```json\n{_json(summary)}\n```")
    return uri


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=1, sort_keys=True, default=str)


__all__ = ["ingest_task", "validate_task", "split_task", "train_task", "tune_task",
           "evaluate_task", "promote_task", "batch_predict_task", "report_task",
           "retry_unless_config_error", "RETRIES", "RETRY_DELAY_S"]
