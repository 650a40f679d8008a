"""Batches for prediction: pandas / dict-of-numpy conversions, feature selection and
stacking, the column checks done before any scoring starts. No framework imports."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np

from engine.exceptions import MissingColumnsError

PREDICTIONS_COLUMN = "predictions"


def is_dataframe(obj: Any) -> bool:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        return False
    return isinstance(obj, pd.DataFrame)


def column_names(batch: Any) -> List[str]:
    """The column names of a DataFrame or a dict of arrays, in order."""
    return [str(c) for c in batch.columns] if is_dataframe(batch) else list(batch)


def to_numpy_column(values: Any) -> np.ndarray:
    """One column as a numpy array: a pandas column of equal-shape arrays (Ray's tensor
    columns, lists) becomes one ``(n, ...)`` array."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        return values
    if hasattr(values, "to_numpy"):
        values = values.to_numpy()
    arr = np.asarray(values)
    if arr.dtype == object and len(arr) and isinstance(arr[0], (np.ndarray, list, tuple)):
        arr = np.stack([np.asarray(v) for v in arr])
    return arr


def to_columns(batch: Any, names: Optional[Iterable[str]] = None) -> Dict[str, np.ndarray]:
    """``{column: numpy array}`` of a DataFrame or a dict of arrays (only ``names`` when
    given)."""
    if not (is_dataframe(batch) or isinstance(batch, dict)):
        raise TypeError(f"predict() takes a pandas DataFrame or a dict of numpy arrays, got "
                        f"{type(batch).__name__}.")
    names = column_names(batch) if names is None else list(names)
    return {name: to_numpy_column(batch[name]) for name in names}


def feature_matrix(columns: Dict[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    """The model input from the feature columns.

    A single column holding fixed-size arrays (an ``(n, d)`` or ``(n, h, w)`` tensor
    column, e.g. digits' 64-vector ``"x"``) is passed as it is; otherwise each column
    becomes ``(n, k)`` (a scalar column ``k = 1``) and they are concatenated in
    ``names`` order, giving ``(n, sum of k)``.
    """
    if len(names) == 1 and columns[names[0]].ndim >= 2:
        return columns[names[0]]
    parts = [columns[n].reshape(len(columns[n]), -1) for n in names]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts, axis=1)


def resolve_feature_columns(explicit: Optional[Sequence[str]], card: Optional[Dict[str, Any]],
                            available: Sequence[str], exclude: Iterable[str] = ()
                            ) -> List[str]:
    """Which columns are features: ``explicit`` if given, else the model card's
    ``feature_columns``, else every available column except ``exclude`` and the card's
    label column."""
    if isinstance(explicit, str):
        explicit = [explicit]
    if explicit:
        return list(explicit)
    from_card = (card or {}).get("feature_columns")
    if from_card:
        return [from_card] if isinstance(from_card, str) else list(from_card)
    skip = set(exclude)
    label = (card or {}).get("label_column")
    if label:
        skip.add(label)
    return [c for c in available if c not in skip]


def preprocessor_columns(preprocessor: Any) -> Optional[List[str]]:
    """The input columns a built-in preprocessor reads (``[]`` for none); None when it
    is a custom one whose inputs are not known."""
    if preprocessor is None:
        return []
    from engine import preprocessors as _pp

    if isinstance(preprocessor, _pp.Chain):
        out: List[str] = []
        for p in preprocessor.preprocessors:
            cols = preprocessor_columns(p)
            if cols is None:
                return None
            out += [c for c in cols if c not in out]
        return out
    if type(preprocessor) in (_pp.StandardScaler, _pp.MinMaxScaler):
        return list(preprocessor.columns)
    return None


def check_columns(available: Sequence[str], required: Dict[str, Sequence[str]],
                  where: str) -> None:
    """Raise :class:`MissingColumnsError` naming every required column ``available``
    lacks. ``required`` maps why a column is needed (e.g. ``"feature columns from the
    model card"``) to the columns."""
    have = set(available)
    missing: List[str] = []
    reasons = []
    for why, cols in required.items():
        lacking = [c for c in cols if c not in have]
        if lacking:
            reasons.append(f"{why}: {lacking}")
            missing += [c for c in lacking if c not in missing]
    if missing:
        raise MissingColumnsError(
            f"{where} is missing column(s) {missing} ({'; '.join(reasons)}); it has "
            f"{list(available)}. Add the columns, or pass feature_columns=[...] naming "
            "the ones to use.", missing)


def output_batch(outputs: Dict[str, np.ndarray], like: Any) -> Any:
    """The predictions in the kind of batch given: a DataFrame (a multi-dimensional
    output becomes a column of per-row arrays) or a dict of arrays."""
    if not is_dataframe(like):
        return outputs
    import pandas as pd

    data = {k: list(v) if v.ndim > 1 else v for k, v in outputs.items()}
    return pd.DataFrame(data, index=like.index)
