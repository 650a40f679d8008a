"""Metrics for ``engine.evaluate``: classification or regression, scikit-learn's
metrics, and the confusion matrix as a PNG (matplotlib, drawn off-screen). The rules
are documented in ``engine/evaluate.py``."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from engine.exceptions import ConfigError

CLASSIFICATION_METRICS = ("accuracy", "precision", "recall", "f1", "roc_auc", "log_loss")
REGRESSION_METRICS = ("rmse", "mae", "r2")
CONFUSION_MATRIX_FILE = "confusion_matrix.png"
TASKS = ("classification", "regression")

MetricSpec = Union[str, Callable[[np.ndarray, np.ndarray], float]]


def infer_task(y_true: np.ndarray, scores: np.ndarray, declared: Optional[str] = None) -> str:
    """``"classification"`` or ``"regression"`` (the rules are in the module doc)."""
    if declared:
        if declared not in TASKS:
            raise ConfigError(f"task must be one of {TASKS}, got {declared!r}.")
        return declared
    y_true, scores = np.asarray(y_true), np.asarray(scores)
    whole = _whole_numbers(y_true)
    if scores.ndim == 2 and scores.shape[1] >= 2 and whole:
        return "classification"
    if scores.ndim == 1 and scores.dtype.kind in "iub" and whole:
        return "classification"
    if (scores.ndim == 1 and y_true.dtype.kind in "iub" and scores.dtype.kind == "f"
            and set(np.unique(y_true).tolist()) <= {0, 1}
            and len(scores) and scores.min() >= 0.0 and scores.max() <= 1.0):
        return "classification"
    return "regression"


def classification_metrics(y_true: np.ndarray, scores: np.ndarray,
                           metrics: Optional[Sequence[MetricSpec]] = None) -> Dict[str, Any]:
    """Metrics of class predictions: per-class scores ``(n, K)`` (probabilities or
    logits), one probability of class 1 per row, or the predicted labels."""
    from sklearn import metrics as skm

    y_true = np.asarray(y_true)
    y_pred, probs, labels = _classes(y_true, np.asarray(scores))
    names, custom = _select(metrics, CLASSIFICATION_METRICS)
    out: Dict[str, Any] = {}
    warnings: List[str] = []
    simple = {
        "accuracy": lambda: skm.accuracy_score(y_true, y_pred),
        "precision": lambda: skm.precision_score(y_true, y_pred, average="macro",
                                                 zero_division=0),
        "recall": lambda: skm.recall_score(y_true, y_pred, average="macro", zero_division=0),
        "f1": lambda: skm.f1_score(y_true, y_pred, average="macro", zero_division=0),
    }
    for name in names:
        if name in simple:
            out[name] = float(simple[name]())
        elif probs is None:
            if metrics is not None:
                raise ConfigError(f"{name} needs class probabilities, and the model "
                                  "predicts labels only.")
        else:
            out[name] = _probabilistic(name, y_true, probs, labels, warnings)
    for fn in custom:
        out[fn.__name__] = float(fn(y_true, y_pred))
    matrix = skm.confusion_matrix(y_true, y_pred, labels=labels)
    out.update(labels=[_py(v) for v in labels], confusion_matrix=matrix.tolist())
    if warnings:
        out["warnings"] = warnings
    return out


def regression_metrics(y_true: np.ndarray, y_pred: np.ndarray,
                       metrics: Optional[Sequence[MetricSpec]] = None) -> Dict[str, Any]:
    """RMSE, MAE and R² (scikit-learn) of numeric predictions."""
    from sklearn import metrics as skm

    y_true = np.asarray(y_true, dtype=np.float64)
    y_pred = np.asarray(y_pred, dtype=np.float64)
    names, custom = _select(metrics, REGRESSION_METRICS)
    fns = {"rmse": lambda: np.sqrt(skm.mean_squared_error(y_true, y_pred)),
           "mae": lambda: skm.mean_absolute_error(y_true, y_pred),
           "r2": lambda: skm.r2_score(y_true, y_pred)}
    out: Dict[str, Any] = {name: float(fns[name]()) for name in names}
    for fn in custom:
        out[fn.__name__] = float(fn(y_true, y_pred))
    return out


def _classes(y_true: np.ndarray, scores: np.ndarray
             ) -> Tuple[np.ndarray, Optional[np.ndarray], np.ndarray]:
    """``(predicted labels, probabilities (n, K) or None, class labels)``."""
    if scores.ndim == 2 and scores.shape[1] >= 2:
        probs = scores.astype(np.float64)
        if not (probs.min() >= 0 and np.allclose(probs.sum(axis=1), 1.0, atol=1e-4)):
            z = probs - probs.max(axis=1, keepdims=True)  # logits: softmax
            probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        labels = np.arange(probs.shape[1])
        bad = ~np.isin(y_true, labels)
        if bad.any():
            raise ConfigError(
                f"Labels must be class indices 0..{len(labels) - 1} for a model with "
                f"{len(labels)} outputs; found {np.unique(y_true[bad])[:10].tolist()}.")
        return probs.argmax(axis=1), probs, labels
    if scores.ndim == 1 and scores.dtype.kind == "f":
        p1 = scores.astype(np.float64)
        return (p1 >= 0.5).astype(np.int64), np.column_stack([1 - p1, p1]), np.arange(2)
    y_pred = scores.reshape(len(scores))
    return y_pred, None, np.unique(np.concatenate([y_true, y_pred]))


def _probabilistic(name: str, y_true: np.ndarray, probs: np.ndarray, labels: np.ndarray,
                   warnings: List[str]) -> Optional[float]:
    """ROC AUC or log loss; None (and why, in ``warnings``) where it is undefined, e.g.
    a class absent from ``y_true`` (scikit-learn raises or warns and returns NaN)."""
    import warnings as _warnings

    from sklearn import metrics as skm

    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        try:
            if name == "log_loss":
                value = float(skm.log_loss(y_true, probs, labels=labels))
            elif len(labels) == 2:
                value = float(skm.roc_auc_score(y_true, probs[:, 1]))
            else:
                value = float(skm.roc_auc_score(y_true, probs, multi_class="ovr",
                                                average="macro", labels=labels))
        except ValueError as exc:
            warnings.append(f"{name}: {exc}")
            return None
    if np.isnan(value):
        why = "; ".join(str(w.message) for w in caught) or "undefined on this data"
        warnings.append(f"{name}: {why}")
        return None
    return value


def _select(metrics: Optional[Sequence[MetricSpec]], known: Sequence[str]
            ) -> Tuple[List[str], List[Callable]]:
    if metrics is None:
        return list(known), []
    if isinstance(metrics, str):
        metrics = [metrics]
    names = [m for m in metrics if isinstance(m, str)]
    custom = [m for m in metrics if callable(m) and not isinstance(m, str)]
    unknown = [m for m in metrics if not isinstance(m, str) and not callable(m)]
    unknown += [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"Unknown metric(s) {unknown} for this task; known: {list(known)} "
                          "(or pass callables f(y_true, y_pred)).")
    return names, custom


def _whole_numbers(y: np.ndarray) -> bool:
    if y.dtype.kind in "iub":
        return True
    if y.dtype.kind != "f" or not len(y) or not np.isfinite(y).all():
        return False
    return bool(np.all(y == np.round(y)))


def _py(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


# --- confusion matrix --------------------------------------------------------------------
def confusion_matrix_png(matrix: Sequence[Sequence[int]], labels: Sequence[Any]) -> bytes:
    """A PNG of the confusion matrix (counts in the cells), drawn off-screen (Agg)."""
    import io

    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError("evaluate() draws its confusion matrix with matplotlib: pip "
                          "install 'trainyard[tracking]'") from exc
    m = np.asarray(matrix)
    size = 2.0 + 0.45 * len(labels)
    fig = Figure(figsize=(size + 1.0, size), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(m, cmap="Blues")
    fig.colorbar(image, ax=ax, shrink=0.8)
    ticks = range(len(labels))
    ax.set_xticks(ticks, [str(v) for v in labels])
    ax.set_yticks(ticks, [str(v) for v in labels])
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    threshold = m.max() / 2 if m.size else 0
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            ax.text(j, i, str(m[i, j]), ha="center", va="center", fontsize="small",
                    color="white" if m[i, j] > threshold else "black")
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)
    return buf.getvalue()


def write_confusion_matrix(matrix: Sequence[Sequence[int]], labels: Sequence[Any],
                           output_dir: Optional[str] = None) -> str:
    """Write ``confusion_matrix.png`` into ``output_dir`` (a new temporary directory when
    None; a URI goes through pyarrow.fs) and return its path."""
    from engine._internal.plotting import write_png
    from engine._internal.storage.filesystem import is_uri, join

    if output_dir is None:
        output_dir = tempfile.mkdtemp(prefix="trainyard_eval_")
    path = join(output_dir, CONFUSION_MATRIX_FILE) if is_uri(output_dir) \
        else os.path.join(os.path.abspath(os.path.expanduser(output_dir)),
                          CONFUSION_MATRIX_FILE)
    return write_png(confusion_matrix_png(matrix, labels), path, output_dir)
