"""Batch prediction with whatever model an alias (``production``) points at.

    python -m flows.batch_predict --pipeline digits --source /data/new_digits.parquet

The alias is read when the flow runs, so a deployment of this flow always scores with
the model the latest successful retraining promoted.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, Optional

from prefect import flow

import tasks
from engine.storage import default_root
from tasks.prefect import (RETRIES, RETRY_DELAY_S, batch_predict_task, ingest_task,
                           notify_flow_failure, task_options)
from tasks.refs import DatasetRef


class NoModelError(LookupError):
    """The alias was never set for this pipeline: nothing to score with."""


@flow(name="batch-predict", log_prints=True, on_failure=[notify_flow_failure],
      on_crashed=[notify_flow_failure])
def batch_predict(pipeline: str = "digits", source: Optional[str] = None,
                  storage: Optional[str] = None, alias: str = "production",
                  output: Optional[str] = None, num_workers: int = 1,
                  keep_columns: Optional[List[str]] = None,
                  task_retries: int = RETRIES,
                  retry_delay_s: float = RETRY_DELAY_S,
                  checkpoint_uri: Optional[str] = None,
                  execution: Optional[str] = None) -> Dict[str, Any]:
    """Score ``source`` with the ``alias`` model of ``pipeline``.

    Args:
        pipeline: A registered pipeline.
        source: Data to score (default: the pipeline's data source).
        storage: Storage root (where the alias and outputs live).
        alias: Which model (``production``).
        output: Directory for the predictions (default under ``<storage>/predictions``).
        num_workers: Scoring actors.
        keep_columns: Input columns kept beside the predictions (default: every
            column that is not a model input).
        checkpoint_uri: Score with this checkpoint, which must have been promoted as
            ``alias`` (a ``trainyard.model.promoted`` trigger passes it); default: the
            one ``alias`` points at now.
        execution: ``ray_job`` scores in a Ray job on the cluster (see flows.retrain).

    Returns:
        ``{"model": <checkpoint URI>, "predictions": DatasetRef as a dict}``.

    Raises:
        NoModelError: the alias was never set (run the retrain flow first).
    """
    from pipelines import get_pipeline

    spec = get_pipeline(pipeline)
    storage = default_root(storage)
    model = (tasks.promoted_checkpoint(pipeline, checkpoint_uri, alias, storage=storage)
             if checkpoint_uri else tasks.resolve_alias(pipeline, alias, storage=storage))
    if model is None:
        raise NoModelError(f"No {alias!r} model for pipeline {pipeline!r} under {storage!r}: "
                           "run the retrain flow first (python -m flows.retrain).")
    retry = task_options(task_retries, retry_delay_s, storage)
    data = ingest_task.with_options(**retry)(source or spec.source, storage=storage)
    scored: DatasetRef = batch_predict_task.with_options(**retry)(
        model, data, output, num_workers=num_workers, keep_columns=keep_columns,
        execution=execution)
    print(f"Scored {scored.num_rows} rows with {model.uri}: {scored.uri}")
    return {"model": model.uri, "predictions": scored.to_dict()}


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", default="digits")
    parser.add_argument("--source", default=None)
    parser.add_argument("--storage", default=None)
    parser.add_argument("--alias", default="production")
    parser.add_argument("--output", default=None)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    storage = os.path.abspath(args.storage) if args.storage and "://" not in args.storage \
        else args.storage
    from flows._server import prefect_api

    with prefect_api():
        batch_predict(pipeline=args.pipeline, source=args.source, storage=storage,
                      alias=args.alias, output=args.output, num_workers=args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
