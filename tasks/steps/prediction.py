"""The prediction steps: ``evaluate`` a checkpoint on labelled data, ``batch_predict``
a data set with it. A retry of either replaces its output.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from engine.storage import Storage, default_root, redact
from tasks import layout
from tasks.ray_jobs.planning import plan
from tasks.refs import CheckpointRef, DatasetRef
from tasks.sources import files
from tasks.steps import _predict, _training
from tasks.steps.data import DatasetLike

CheckpointLike = Union[CheckpointRef, Dict[str, Any]]


def evaluate(checkpoint: CheckpointLike, dataset: DatasetLike, *,
             output_dir: Optional[str] = None, num_workers: int = 1,
             execution: Optional[str] = None,
             runtime_env: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Score a labelled data set with a checkpoint (``engine.predict.evaluate``).

    Args:
        checkpoint: What :func:`train` returned (its pipeline loads the model).
        dataset: A labelled data set (the validation split).
        output_dir: Where ``confusion_matrix.png`` and ``metrics.json`` go; default
            ``<run>/evaluations/<checkpoint>-<data fingerprint>/``.
        num_workers: Scoring actors for large data sets.
        execution, runtime_env: ``ray_job`` runs the step as a Ray job (as ``run`` of
            :func:`train` says); default ``$TRAINYARD_EXECUTION`` or ``local``.

    Returns:
        The metrics (classification: ``accuracy``, ``precision``, ``recall``, ``f1``,
        ``roc_auc``, ``log_loss``, ``confusion_matrix``, ``confusion_matrix_path``;
        regression: ``rmse``, ``mae``, ``r2``) plus ``checkpoint_uri``,
        ``dataset_fingerprint`` and ``metrics_uri``, all JSON values.
    """
    job = plan("evaluate", dict(checkpoint=checkpoint, dataset=dataset,
                                      output_dir=output_dir, num_workers=num_workers,
                                      execution=execution, runtime_env=runtime_env))
    if job is not None:
        return job.run()
    from engine.predict import evaluate as engine_evaluate

    ckpt, spec = _predict.load_checkpoint(checkpoint)
    ref = DatasetRef.from_dict(dataset)
    out = output_dir or evaluation_dir(ckpt, ref.fingerprint)
    # Small data is scored in this process; above the limit a pool of Ray actors scores
    # the files (BatchPredictor) and only labels and predictions come back here.
    small = ref.num_rows * max(len(ref.schema), 1) <= _training.IN_PROCESS_MAX_CELLS
    data = files.read_pandas(ref) if small else ref.uri
    report = engine_evaluate(_predict.engine_checkpoint(ckpt), data, output_dir=out,
                             task=spec.task, num_workers=num_workers,
                             **spec.predictor_kwargs(ckpt.config))
    report = _training.json_safe(report)
    report.update(checkpoint_uri=ckpt.uri, dataset_fingerprint=ref.fingerprint,
                  metrics_uri=redact(layout.sub(out, "metrics.json")))
    st = Storage.from_path(layout.sub(out, "metrics.json"))
    st.write_json_atomic(st.root, report)
    return report


def evaluation_dir(ckpt: CheckpointRef, fingerprint: str) -> str:
    """Where :func:`evaluate` keeps a checkpoint's metrics on one data set by default:
    ``<run>/evaluations/<checkpoint>-<data fingerprint>/``."""
    return layout.sub(_predict.checkpoint_run_uri(ckpt), "evaluations",
                      f"{ckpt.uri.rstrip('/').rsplit('/', 1)[-1]}-{fingerprint[:12]}")


def batch_predict(checkpoint: CheckpointLike, dataset: DatasetLike,
                  output: Optional[str] = None, *, num_workers: int = 1,
                  batch_size: Optional[int] = None,
                  keep_columns: Optional[List[str]] = None,
                  in_process: Optional[bool] = None, execution: Optional[str] = None,
                  runtime_env: Optional[Dict[str, Any]] = None) -> DatasetRef:
    """Score a data set and write the predictions as Parquet.

    Args:
        checkpoint: The model (e.g. ``resolve_alias(pipeline)``).
        dataset: The rows to score (a label column, if present, is kept).
        output: Directory (local or URI) for the predictions; its old content is
            replaced. Default ``<storage>/predictions/<run>-<checkpoint>/<data fp>/``.
        num_workers: Scoring actors, each loading the model once.
        batch_size: Rows per model call.
        keep_columns: Input columns copied beside the predictions; default every
            column that is not a model input (ids, labels).
        in_process: Score in this process (True) or with a pool of ``num_workers`` Ray
            actors reading the files (False, ``engine.predict.BatchPredictor``). Default:
            in this process up to ``IN_PROCESS_MAX_CELLS`` cells, where starting the
            pool would cost more than scoring. Both write the same columns and types.
        execution, runtime_env: ``ray_job`` runs the step as a Ray job (as ``run`` of
            :func:`train` says); default ``$TRAINYARD_EXECUTION`` or ``local``.

    Returns:
        A :class:`DatasetRef` of the predictions: the kept columns, ``predictions`` and,
        for classifiers, ``predicted_label``; rows in input order.
    """
    job = plan("batch_predict", dict(
        checkpoint=checkpoint, dataset=dataset, output=output, num_workers=num_workers,
        batch_size=batch_size, keep_columns=keep_columns, in_process=in_process,
        execution=execution, runtime_env=runtime_env))
    if job is not None:
        return job.run()
    from engine import constants
    from engine.predict import BatchPredictor

    ckpt, spec = _predict.load_checkpoint(checkpoint)
    ref = DatasetRef.from_dict(dataset)
    engine_ckpt = _predict.engine_checkpoint(ckpt)
    features = (engine_ckpt.get_model_card() or {}).get("feature_columns") or []
    keep = list(keep_columns) if keep_columns is not None else [
        c for c in ref.schema if c not in features]
    out = output or layout.sub(
        default_root(ckpt.storage), layout.PREDICTIONS_DIR,
        f"{ckpt.run_name or spec.name}-{ckpt.uri.rstrip('/').rsplit('/', 1)[-1]}",
        ref.fingerprint[:12])
    st = Storage.from_path(out)
    inner = st.root
    kwargs = spec.predictor_kwargs(ckpt.config)
    label = spec.task == "classification"
    if in_process is None:
        in_process = ref.num_rows * max(len(ref.schema), 1) <= _training.IN_PROCESS_MAX_CELLS
    if in_process:
        _predict.score_in_process(engine_ckpt, files.read_pandas(ref), keep, kwargs,
                                  label, st, inner)
    else:
        scored = BatchPredictor(engine_ckpt, **kwargs).predict(
            ref.uri, num_workers=num_workers, keep_columns=keep,
            batch_size=batch_size or constants.DEFAULT_PREDICT_BATCH_SIZE)
        if label:
            scored = scored.map_batches(_predict.add_predicted_label, batch_format="numpy")
        _predict.write_predictions(scored, st, inner)
    return _predict.describe(st, inner, name=f"{ref.name or 'data'}-predictions",
                             metadata={"checkpoint_uri": ckpt.uri, "input": ref.fingerprint,
                                       "pipeline": spec.name})


__all__ = ["evaluate", "batch_predict", "evaluation_dir", "CheckpointLike"]
