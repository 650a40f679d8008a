"""Metrics from every worker: reductions across ranks, and one row per rank and round."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional


def reduce_metrics(all_metrics: List[Dict[str, Any]], spec: Optional[Mapping[str, str]]
                   ) -> Dict[str, float]:
    """``{"<key>_<op>": value}`` for each ``key: op`` of ``RunConfig(metrics_reduce=...)``,
    over the ranks that reported a number for ``key`` (``"outer/inner"`` reaches into
    nested dicts). NaN propagates, as in numpy."""
    out: Dict[str, float] = {}
    for key, op in (spec or {}).items():
        values = [v for v in (lookup(m, key) for m in all_metrics) if _is_number(v)]
        if not values:
            continue
        if op == "mean":
            out[f"{key}_{op}"] = math.fsum(values) / len(values)
        elif op == "sum":
            out[f"{key}_{op}"] = sum(values) if all(isinstance(v, int) for v in values) \
                else math.fsum(values)
        elif any(isinstance(v, float) and math.isnan(v) for v in values):
            out[f"{key}_{op}"] = float("nan")
        else:
            out[f"{key}_{op}"] = min(values) if op == "min" else max(values)
    return out


def worker_rows(history: List[Dict[str, Any]], worker_history: List[List[Dict[str, Any]]]
                ) -> List[Dict[str, Any]]:
    """Every rank's metrics of every round, rank 0's first within a round, each row with
    a ``rank`` column."""
    rows = []
    for i, rank0 in enumerate(history):
        rows.append({"rank": 0, **rank0})
        others = worker_history[i] if i < len(worker_history) else []
        for rank, metrics in enumerate(others, start=1):
            rows.append({"rank": rank, **metrics})
    return rows


def lookup(metrics: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """``metrics[key]``, also reaching into nested dicts with ``a/b``; ``default`` when
    there is no such metric."""
    if key in metrics:
        return metrics[key]
    value: Any = metrics
    for part in key.split("/"):
        if not isinstance(value, dict) or part not in value:
            return default
        value = value[part]
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
