"""``evaluate()``: score a labelled dataset with a checkpoint and compute its metrics.

    from engine.predict import evaluate
    report = evaluate(result.checkpoint, "s3://bucket/validation/", model=build_model())
    report["accuracy"], report["confusion_matrix_path"]

Classification or regression is decided, in this order, by: the ``task=`` argument; the
model card's ``"task"`` (or ``metadata["task"]`` given to the trainer); then the data —
per-class outputs (2-D, two or more columns) with whole-number labels, integer-typed
predictions with whole-number labels, or one probability per row in ``[0, 1]`` with 0/1
integer labels, are classification; anything else is regression.

Classification takes per-class outputs as probabilities when every row is non-negative
and sums to 1, else as logits (softmax gives the probabilities); the predicted class is
the arg max, so labels are class indices ``0 … K-1``. Its metrics: ``accuracy``,
``precision``/``recall``/``f1`` (macro average), ``roc_auc`` (binary, or one-vs-rest
macro) and ``log_loss`` (both only when probabilities are known), plus a confusion
matrix drawn into ``confusion_matrix.png``. Regression: ``rmse``, ``mae``, ``r2``.
All values come from scikit-learn. Predictions and labels are gathered on the driver.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from engine._internal.data import batches as _batches
from engine._internal.data.batch_predictor import BatchPredictor
from engine._internal.metrics import (CLASSIFICATION_METRICS, CONFUSION_MATRIX_FILE,
                                      REGRESSION_METRICS, TASKS, MetricSpec,
                                      classification_metrics, infer_task,
                                      regression_metrics, write_confusion_matrix)
from engine.exceptions import ConfigError
from engine.predictor import DEFAULT_BATCH_SIZE, get_predictor_class, required_columns


def evaluate(checkpoint: Any, dataset: Any, label_column: Optional[str] = None,
             metrics: Optional[Sequence[MetricSpec]] = None,
             output_dir: Optional[str] = None, *, predictor_cls: Optional[type] = None,
             task: Optional[str] = None, feature_columns: Optional[Sequence[str]] = None,
             batch_size: Optional[int] = None, num_workers: int = 1,
             **predictor_kwargs: Any) -> Dict[str, Any]:
    """Predict ``dataset`` with ``checkpoint`` and compare with its labels.

    Args:
        checkpoint: An ``engine.Checkpoint`` a trainer wrote (its model card names the
            framework, feature and label columns).
        dataset: A pandas DataFrame or dict of arrays (scored in this process), or a
            ``ray.data.Dataset`` / Parquet or CSV path (scored by a :class:`BatchPredictor`
            with ``num_workers`` actors).
        label_column: Default: the model card's ``label_column``.
        metrics: Names to compute (default: all that apply, see the module doc), and/or
            callables ``f(y_true, y_pred) -> float`` reported under their ``__name__``.
        output_dir: Where the confusion matrix PNG goes (local or URI); default: a new
            temporary directory.
        predictor_cls: Default: the predictor registered for the card's framework.
        task: ``"classification"`` or ``"regression"``; default: inferred.
        feature_columns, batch_size: As for ``BatchPredictor.predict``.
        **predictor_kwargs: For ``predictor_cls.from_checkpoint`` (e.g. ``model=``).

    Returns:
        ``{"task", "label_column", "num_rows", <metric>: float, …}``; classification adds
        ``"labels"``, ``"confusion_matrix"`` (rows: true, columns: predicted) and
        ``"confusion_matrix_path"``. A metric that is undefined on this data (e.g. ROC
        AUC with one class present) is None, and ``"warnings"`` says why.

    Raises:
        ConfigError: no label column, an unknown metric or task.
        MissingColumnsError: the dataset lacks the label or a feature column.
    """
    card = checkpoint.get_model_card() or {}
    label = label_column or card.get("label_column")
    if not label:
        raise ConfigError("evaluate() needs the label column: pass label_column=..., or "
                          "train with metadata={'label_column': ...} so the model card has it.")
    if predictor_cls is None:
        predictor_cls = get_predictor_class(card.get("framework"))
    batch_predictor = BatchPredictor(checkpoint, predictor_cls, **predictor_kwargs)
    y_true, scores = _score(batch_predictor, dataset, label, feature_columns, batch_size,
                            num_workers)
    declared = task or card.get("task") or (card.get("metadata") or {}).get("task")
    kind = infer_task(y_true, scores, declared)
    if kind == "classification":
        report = classification_metrics(y_true, scores, metrics)
        report["confusion_matrix_path"] = write_confusion_matrix(
            report["confusion_matrix"], report["labels"], output_dir)
    else:
        report = regression_metrics(y_true, scores, metrics)
    return {"task": kind, "label_column": label, "num_rows": int(len(y_true)), **report}


# --- scoring ----------------------------------------------------------------------------
def _score(batch_predictor: Any, dataset: Any, label: str,
           feature_columns: Optional[Sequence[str]], batch_size: Optional[int],
           num_workers: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(labels, predictions)`` as numpy arrays, in the same row order."""
    if _batches.is_dataframe(dataset) or isinstance(dataset, dict):
        return _score_in_process(batch_predictor, dataset, label, feature_columns)
    out = batch_predictor.predict(dataset, batch_size=batch_size or DEFAULT_BATCH_SIZE,
                                  num_workers=num_workers, feature_columns=feature_columns,
                                  keep_columns=[label])
    labels, preds = [], []
    for batch in out.iter_batches(batch_format="numpy", batch_size=None):
        labels.append(_batches.to_numpy_column(batch[label]))
        preds.append(_batches.to_numpy_column(batch[_batches.PREDICTIONS_COLUMN]))
    if not labels:
        raise ConfigError("evaluate(): the dataset has no rows.")
    return np.concatenate(labels), np.concatenate(preds)


def _score_in_process(batch_predictor: Any, data: Any, label: str,
                      feature_columns: Optional[Sequence[str]]
                      ) -> Tuple[np.ndarray, np.ndarray]:
    available = _batches.column_names(data)
    bp = batch_predictor
    predictor = bp.predictor_cls.from_checkpoint(bp.checkpoint, **bp._actor_kwargs(False))
    needed = required_columns(bp.model_card, predictor.preprocessor, feature_columns, [label])
    _batches.check_columns(available, needed, "The dataset")
    if _batches.preprocessor_columns(predictor.preprocessor) is not None:
        feature_columns = _batches.resolve_feature_columns(
            feature_columns, bp.model_card, available, exclude=[label])
    out = predictor._predict_batch(data, feature_columns, exclude=[label])
    y_true = _batches.to_numpy_column(data[label])
    if len(y_true) == 0:
        raise ConfigError("evaluate(): the dataset has no rows.")
    return y_true, _batches.to_numpy_column(out[_batches.PREDICTIONS_COLUMN])


__all__ = ["evaluate", "infer_task", "classification_metrics", "regression_metrics",
           "write_confusion_matrix", "CLASSIFICATION_METRICS", "REGRESSION_METRICS",
           "CONFUSION_MATRIX_FILE", "TASKS", "MetricSpec"]
