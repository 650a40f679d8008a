"""The retraining flow: ingest → validate → split → tune → train the best config longer → evaluate
→ promote (gated) → batch-predict with the production model → report.

    python -m flows.retrain                        # digits, on a local Ray, Prefect's
                                                   # ephemeral server: nothing to start
    python -m flows.retrain --pipeline breast_cancer --storage s3://bucket/ty --workers 4

As a deployment (``deploy/prefect.yaml``) it runs on a cron schedule on a process work
pool. With ``RAY_ADDRESS`` set, training runs on that Ray cluster; with
``execution="ray_job"`` (the ``retrain-digits-ray-job`` deployment) the steps that start
Ray work are submitted to that cluster as Ray jobs, and this flow run only waits.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any, Dict, Iterator, Optional

from prefect import flow
from prefect.runtime import flow_run

import engine
import tasks
from engine.storage import default_root
from flows._server import patient_ephemeral_server, prefect_api  # noqa: F401 (re-export)
from tasks.prefect import (RETRIES, RETRY_DELAY_S, batch_predict_task, evaluate_task,
                           ingest_task, notify_flow_failure, promote_task,
                           report_task, split_task, task_options, train_task,
                           tune_task, validate_task)
from tasks.registry import production_trained_on
from tasks.report import report_dir, summarize


@flow(name="retrain", log_prints=True, on_failure=[notify_flow_failure],
      on_crashed=[notify_flow_failure])
def retrain(pipeline: str = "digits", source: Optional[str] = None,
            storage: Optional[str] = None, num_workers: int = 2, test_size: float = 0.2,
            seed: int = 0, param_space: Optional[Dict[str, Any]] = None,
            tune_samples: int = 1, tune_epochs: int = 3,
            train_epochs: Optional[int] = None,
            train_config: Optional[Dict[str, Any]] = None,
            gate: Optional[Dict[str, Any]] = None,
            alias: str = "production", scoring_source: Optional[str] = None,
            max_failures: int = 0, task_retries: int = RETRIES,
            retry_delay_s: float = RETRY_DELAY_S, validate_data: bool = True,
            data_schema: Optional[Dict[str, Any]] = None,
            data_checks: Optional[Dict[str, Any]] = None,
            window: Optional[Dict[str, Any]] = None,
            partition_filter: Optional[Dict[str, Any]] = None,
            incremental: bool = False, skip_if_unchanged: bool = False,
            execution: Optional[str] = None,
            runtime_env: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Retrain a pipeline's model, promote it if it passes the gate, score with it.

    Args:
        pipeline: A pipeline name (``digits``, ``breast_cancer``, or an installed
            plugin's: ``trainyard pipelines`` lists them).
        source: Data to train on (default: the pipeline's, e.g. ``sklearn:digits``).
        storage: Storage root for data, runs, models, predictions and reports
            (default ``$TRAINYARD_STORAGE_PATH`` or ``~/trainyard_results``).
        num_workers: Training workers (per tuning trial, too).
        test_size, seed: The validation split.
        param_space: The search (JSON form, see ``tasks.tune``); default the
            pipeline's small grid.
        tune_samples: Repeats of the grid.
        tune_epochs: Epochs (boosting rounds) per trial.
        train_epochs: Epochs of the final training (default: the pipeline's).
        train_config: More hyperparameters of the final training (over the best ones).
        gate: Promotion gate (default: the pipeline's, e.g. ``{"accuracy": [">=0.9",
            ">=champion"]}``: a floor, and not worse than the current model on the same
            validation data).
        alias: The alias promoted and used for scoring.
        scoring_source: Data to score (default: the validation split).
        max_failures: Engine-level restarts before a task fails (0: Prefect retries).
        task_retries, retry_delay_s: Prefect retries of each task.
        validate_data: Check the data before training (``tasks.validate``): the
            pipeline's schema, and drift against the production model's training data.
            A failed hard check fails the flow before any training starts.
        data_schema, data_checks: Instead of the pipeline's schema / more checks
            (``min_rows``, ``drift``, ``reference``), as ``validate`` takes them.
        window, partition_filter, incremental: For a Hive-partitioned ``source``
            (``tasks.ingest``); the window ends at this flow run's scheduled
            start time unless it says ``until``.
        skip_if_unchanged: Stop after the split when the ``alias`` model was trained on
            exactly this training data (nothing new arrived).
        execution: ``local`` (this flow run drives Ray) or ``ray_job`` (tune, train,
            evaluate and batch prediction run as Ray jobs on the cluster at
            ``$TRAINYARD_RAY_JOB_ADDRESS`` / an http(s):// ``$RAY_ADDRESS``); default
            ``$TRAINYARD_EXECUTION`` or ``local``.
        runtime_env: Ray's runtime_env of those jobs (default: the cluster's own
            trainyard installation).

    Returns:
        The summary (best config, validation metrics, promotion, where things are).
    """
    from pipelines import get_pipeline

    spec = get_pipeline(pipeline)
    storage = default_root(storage)
    retry = task_options(task_retries, retry_delay_s, storage)
    scaling = {"num_workers": num_workers}
    jobs = {"execution": execution, "runtime_env": runtime_env}
    with _quiet_ray_data():
        data = ingest_task.with_options(**retry)(
            source or spec.source, storage=storage, partition_filter=partition_filter,
            window=window, incremental=incremental)
        spec.check_columns(data.columns)
        if validate_data:
            validate_task.with_options(**retry)(data, pipeline, data_schema, data_checks,
                                                storage)
        stratify = spec.label_column if spec.task == "classification" else None
        splits = split_task.with_options(**retry)(data, test_size, seed, stratify)
        current = production_trained_on(pipeline, splits["train"], alias, storage=storage) \
            if skip_if_unchanged else None
        if current is not None:
            print(f"The data did not change: {pipeline}/{alias} ({current.uri}) was trained "
                  "on this training set; skipping training (skip_if_unchanged).")
            return {"pipeline": pipeline, "skipped": True, "dataset": data.uri,
                    "production": current.uri, "promoted": False}
        # The final training starts on the tune's workers (when it drives Ray here);
        # they stop at the end of the block, before scoring needs their CPUs.
        with engine.reuse_workers():
            tuned = tune_task.with_options(**retry)(
                pipeline, splits, param_space, {"num_samples": tune_samples, "seed": seed},
                scaling, {"storage": storage, "config": epochs_config(spec, tune_epochs),
                          "max_failures": max_failures, "num_to_keep": 1, **jobs})
            config = {**tuned.best_config, **(train_config or {}),
                      **epochs_config(spec, train_epochs)}
            ckpt = train_task.with_options(**retry)(
                pipeline, splits, scaling, {"storage": storage, "config": config,
                                            "max_failures": max_failures, **jobs})
        metrics = evaluate_task.with_options(**retry)(ckpt, splits["validation"], **jobs)
        promotion = promote_task.with_options(**retry)(ckpt, metrics, alias, gate,
                                                       dataset=splits["validation"])
        production = tasks.resolve_alias(pipeline, alias, storage=storage)
        predictions = None
        if production is None:
            print(f"No {alias!r} model for {pipeline!r} (the gate failed and none was "
                  "promoted before): skipping batch prediction.")
        else:
            scoring = (ingest_task.with_options(**retry)(scoring_source, storage=storage)
                       if scoring_source else splits["validation"])
            predictions = batch_predict_task.with_options(**retry)(
                production, scoring, num_workers=1, **jobs)
        summary = summarize(pipeline, ckpt, metrics, promotion, tuned, predictions,
                            production, spec.epochs_key)
        directory = report_dir(storage, pipeline, flow_run.id or "local")
        summary["report"] = report_task.with_options(**retry)(directory, summary, ckpt,
                                                              metrics, tuned)
    print(format_summary(summary))
    return summary


def epochs_config(spec: Any, epochs: Optional[int]) -> Dict[str, Any]:
    """``{epochs_key: epochs}`` (default: the pipeline's), or nothing for a model without
    epochs (scikit-learn)."""
    if not spec.epochs_key:
        return {}
    epochs = epochs or spec.defaults.get(spec.epochs_key)
    return {} if epochs is None else {spec.epochs_key: epochs}


@contextlib.contextmanager
def _quiet_ray_data() -> Iterator[None]:
    """No Ray Data progress bars in flow logs (they are redrawn lines meant for a TTY)."""
    try:
        import ray.data
    except ImportError:
        yield
        return
    ctx = ray.data.DataContext.get_current()
    old = ctx.enable_progress_bars
    ctx.enable_progress_bars = False
    try:
        yield
    finally:
        ctx.enable_progress_bars = old


def format_summary(summary: Dict[str, Any]) -> str:
    val = summary.get("validation", {})
    shown = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                      for k, v in val.items())
    key = summary.get("epochs_key")
    best = {k: v for k, v in summary["best_config"].items() if k != key}
    rounds = (f" ({summary['trials']} trials of {summary['best_config'].get(key)} {key}; "
              f"trained with {summary['trained_config'].get(key)} {key})") if key else \
        f" ({summary['trials']} trials)"
    return "\n".join([
        f"== retrain {summary['pipeline']}: "
        f"{'PROMOTED' if summary['promoted'] else 'not promoted'}",
        f"best config:        {json.dumps(best, sort_keys=True)}{rounds}",
        f"validation:         {shown}",
        f"gate:               {'; '.join(summary['gate']) or 'none'}",
        f"checkpoint:         {summary['checkpoint']}",
        f"production model:   {summary['production']}",
        f"predictions:        {summary['predictions']} ({summary['predicted_rows']} rows)",
        f"report:             {summary.get('report')}",
    ])


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", default="digits")
    parser.add_argument("--source", default=None)
    parser.add_argument("--storage", default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tune-samples", type=int, default=1)
    parser.add_argument("--tune-epochs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=None, help="final training epochs")
    args = parser.parse_args(argv)
    storage = os.path.abspath(args.storage) if args.storage and "://" not in args.storage \
        else args.storage
    with prefect_api():
        retrain(pipeline=args.pipeline, source=args.source, storage=storage,
                num_workers=args.workers, tune_samples=args.tune_samples,
                tune_epochs=args.tune_epochs, train_epochs=args.epochs)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    sys.exit(main())
