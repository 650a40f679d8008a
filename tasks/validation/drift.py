"""Per-feature drift between a data set and a reference: population stability index (PSI)
or the two-sample Kolmogorov–Smirnov statistic.

Both data sets are read as a systematic sample (every k-th row, at most
``MAX_SAMPLE_ROWS`` per column), so a check of a large data set reads the columns once
and holds a bounded amount in memory. Numeric columns are binned at the reference's
quantiles (PSI) or compared as distributions (KS); text, boolean and dictionary columns
are compared by category frequencies (PSI for both methods), and categories the
reference never had are listed.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import pyarrow as pa

from engine.exceptions import ConfigError
from tasks.sources import files
from tasks.refs import DatasetRef

MAX_SAMPLE_ROWS = 200_000
METHODS = ("psi", "ks")
#: Defaults of a pipeline's ``drift`` setting (PipelineSpec.drift).
DEFAULT_DRIFT: Dict[str, Any] = {"method": "psi", "threshold": 0.2, "fail": False,
                                 "bins": 10, "columns": None}
_EPS = 1e-4  # floor of a bin's share: an empty bin must not make PSI infinite
_MAX_SHOWN_NEW = 10


def drift_settings(drift: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """``drift`` over :data:`DEFAULT_DRIFT`, checked.

    Raises:
        ConfigError: an unknown key, method or a threshold that is not a positive number.
    """
    out = dict(DEFAULT_DRIFT)
    unknown = sorted(set(drift or {}) - set(DEFAULT_DRIFT) - {"reference"})
    if unknown:
        raise ConfigError(f"drift settings have unknown keys {unknown}: use "
                          f"{sorted(DEFAULT_DRIFT)}.")
    out.update({k: v for k, v in (drift or {}).items() if k != "reference"})
    if out["method"] not in METHODS:
        raise ConfigError(f"drift method {out['method']!r}: use 'psi' or 'ks'.")
    thr = out["threshold"]
    if isinstance(thr, bool) or not isinstance(thr, (int, float)) or thr <= 0:
        raise ConfigError(f"drift threshold {thr!r}: use a positive number, e.g. 0.2 "
                          "(PSI) or 0.1 (KS).")
    if not isinstance(out["bins"], int) or out["bins"] < 2:
        raise ConfigError(f"drift bins {out['bins']!r}: use an integer >= 2.")
    return out


def sample(ref: DatasetRef, columns: Sequence[str],
           max_rows: int = MAX_SAMPLE_ROWS) -> Dict[str, np.ndarray]:
    """Every k-th row of ``columns`` (k chosen so that at most ``max_rows`` remain)."""
    stride = max(1, math.ceil(ref.num_rows / max_rows)) if ref.num_rows else 1
    parts: Dict[str, List[np.ndarray]] = {c: [] for c in columns}
    offset = 0
    for batch in files.scan(ref, list(columns)):
        first = (-offset) % stride  # the first row of this batch on the global stride
        take = np.arange(first, batch.num_rows, stride)
        for name, col in zip(batch.schema.names, batch.columns):
            parts[name].append(_values(col.take(pa.array(take))))
        offset += batch.num_rows
    return {c: (np.concatenate(v) if v else np.array([])) for c, v in parts.items()}


def _values(col: pa.Array) -> np.ndarray:
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        return col.to_numpy(zero_copy_only=False).astype(np.float64)
    return np.asarray(col.to_pylist(), dtype=object)


def is_categorical(arrow_type: str) -> bool:
    """Text, boolean and dictionary columns are compared by category."""
    return arrow_type in ("string", "large_string", "bool") \
        or arrow_type.startswith("dictionary")


def is_numeric(arrow_type: str) -> bool:
    return arrow_type.startswith(("int", "uint", "float", "double", "halffloat", "decimal"))


def psi_numeric(reference: np.ndarray, current: np.ndarray, bins: int) -> float:
    """PSI over ``bins`` quantile bins of the reference (NaN counts as its own bin)."""
    ref_ok, cur_ok = reference[~np.isnan(reference)], current[~np.isnan(current)]
    edges = np.unique(np.quantile(ref_ok, np.linspace(0, 1, bins + 1))[1:-1]) \
        if len(ref_ok) else np.array([])
    ref_counts = np.append(np.bincount(np.searchsorted(edges, ref_ok, side="right"),
                                       minlength=len(edges) + 1), len(reference) - len(ref_ok))
    cur_counts = np.append(np.bincount(np.searchsorted(edges, cur_ok, side="right"),
                                       minlength=len(edges) + 1), len(current) - len(cur_ok))
    return _psi(ref_counts, cur_counts)


def psi_categorical(reference: np.ndarray, current: np.ndarray) -> float:
    cats = sorted({_key(v) for v in reference} | {_key(v) for v in current})
    index = {c: i for i, c in enumerate(cats)}
    ref_counts = np.bincount([index[_key(v)] for v in reference], minlength=len(cats))
    cur_counts = np.bincount([index[_key(v)] for v in current], minlength=len(cats))
    return _psi(ref_counts, cur_counts)


def _key(value: Any) -> str:
    return "<null>" if value is None else repr(value)


def _psi(ref_counts: np.ndarray, cur_counts: np.ndarray) -> float:
    if ref_counts.sum() == 0 or cur_counts.sum() == 0:
        return 0.0
    p = np.maximum(ref_counts / ref_counts.sum(), _EPS)
    q = np.maximum(cur_counts / cur_counts.sum(), _EPS)
    return float(np.sum((q - p) * np.log(q / p)))


def ks_statistic(reference: np.ndarray, current: np.ndarray) -> float:
    from scipy.stats import ks_2samp

    ref_ok, cur_ok = reference[~np.isnan(reference)], current[~np.isnan(current)]
    if not len(ref_ok) or not len(cur_ok):
        return 0.0
    return float(ks_2samp(ref_ok, cur_ok).statistic)


def drift_table(current: DatasetRef, reference: DatasetRef,
                settings: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One row per compared column: ``column``, ``method``, ``statistic``,
    ``threshold``, ``drifted`` and, for categories, ``new_categories``."""
    columns = settings.get("columns") or [c for c in current.schema if c in reference.schema]
    missing = [c for c in columns if c not in current.schema or c not in reference.schema]
    if missing:
        raise ConfigError(f"drift columns {missing} are not in both data sets: the current "
                          f"one has {current.columns}, the reference {reference.columns}.")
    kinds = {c: "category" if is_categorical(current.schema[c]) else "numeric"
             for c in columns
             if is_categorical(current.schema[c]) or is_numeric(current.schema[c])}
    cur, ref = sample(current, list(kinds)), sample(reference, list(kinds))
    rows = []
    for col, kind in kinds.items():
        row: Dict[str, Any] = {"column": col, "threshold": settings["threshold"]}
        if kind == "category" or ref[col].dtype == object or cur[col].dtype == object:
            row.update(method="psi", statistic=psi_categorical(ref[col], cur[col]))
            seen = {_key(v) for v in ref[col]}
            new = sorted({_key(v) for v in cur[col]} - seen)
            if new:
                row["new_categories"] = new[:_MAX_SHOWN_NEW]
        elif settings["method"] == "ks":
            row.update(method="ks", statistic=ks_statistic(ref[col], cur[col]))
        else:
            row.update(method="psi", statistic=psi_numeric(ref[col], cur[col],
                                                           settings["bins"]))
        row["statistic"] = round(row["statistic"], 6)
        row["drifted"] = bool(row["statistic"] > settings["threshold"])
        rows.append(row)
    return rows
