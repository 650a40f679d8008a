"""Model aliases: a gate over evaluation metrics, a pointer per alias, and its history.

    <registry>/<pipeline>/<alias>.json                    the pointer (atomic write)
    <registry>/<pipeline>/history/<alias>/<time>-<id>.json one file per decision

Each decision (promoted or rejected) is written first as its own history file (a new
name each time, so concurrent promoters never overwrite each other's entries); only a
promotion then replaces the pointer, atomically (rename on local disks, one PUT on
object stores). A reader sees the old pointer or the new one, never a mix.
"""

from __future__ import annotations

import math
import operator
import re
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

from engine.exceptions import ConfigError
from engine.storage import Storage, default_root, join, redact
from tasks import _store
from tasks.refs import CheckpointRef, Promotion

HISTORY_DIR = "history"
_ALIAS_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_GATE_RE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*([-+0-9.eE]+|nan|inf)\s*$")
_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
        "==": operator.eq, "!=": operator.ne}


def check_alias(alias: str) -> str:
    if not isinstance(alias, str) or not _ALIAS_RE.match(alias):
        raise ConfigError(f"alias {alias!r} is invalid: use lower-case letters, digits, "
                          "'_' and '-' (e.g. 'production', 'staging').")
    return alias


def parse_gate(gate: Optional[Dict[str, Any]]) -> List[Tuple[str, str, float]]:
    """``{"accuracy": ">=0.9"}`` → ``[("accuracy", ">=", 0.9)]``.

    Raises:
        ConfigError: a condition that is not ``<op><number>`` (ops ``>= > <= < == !=``).
    """
    if gate is None:
        return []
    if not isinstance(gate, dict):
        raise ConfigError(f"gate must be a dict like {{'accuracy': '>=0.9'}}, got {gate!r}.")
    out = []
    for metric, cond in gate.items():
        match = _GATE_RE.match(str(cond))
        if not isinstance(cond, str) or match is None:
            raise ConfigError(
                f"gate[{metric!r}] = {cond!r} is not a condition: write an operator and a "
                "number as a string, e.g. {'accuracy': '>=0.9', 'log_loss': '<0.3'}.")
        out.append((str(metric), match.group(1), float(match.group(2))))
    return out


def check_gate(conditions: List[Tuple[str, str, float]], metrics: Dict[str, Any]
               ) -> Tuple[bool, List[str]]:
    """Whether every condition holds, with one line per condition. A metric that is
    None or NaN (undefined on this data) fails its condition.

    Raises:
        ConfigError: a gate metric that ``metrics`` does not have at all.
    """
    reasons, passed = [], True
    for metric, op, bound in conditions:
        if metric not in metrics:
            numeric = sorted(k for k, v in metrics.items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool))
            raise ConfigError(f"The gate reads {metric!r}, which the metrics do not have: "
                              f"gate on one of {numeric}.")
        value = metrics[metric]
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and not math.isnan(value) and _OPS[op](value, bound))
        passed &= ok
        shown = "undefined" if value is None else f"{value:.6g}" if isinstance(
            value, (int, float)) else repr(value)
        reasons.append(f"{metric} {shown} {op} {bound:g}: {'pass' if ok else 'FAIL'}")
    return passed, reasons


def registry_root(registry: Optional[str], storage: Optional[str]) -> str:
    if registry:
        return default_root(registry)
    return _store.sub(default_root(storage), _store.MODELS_DIR)


def pointer_uri(root: str, pipeline: str, alias: str) -> str:
    return _store.sub(root, _store.clean_name(pipeline, "pipeline"), f"{alias}.json")


def read_pointer(root: str, pipeline: str, alias: str) -> Optional[Dict[str, Any]]:
    st = Storage.from_path(pointer_uri(root, pipeline, alias))
    return st.read_json(st.root)


def decide(checkpoint: CheckpointRef, metrics: Dict[str, Any], alias: str,
           gate: Optional[Dict[str, Any]], root: str) -> Promotion:
    """Check the gate, write the history entry, and move the pointer if it passed."""
    pipeline = checkpoint.pipeline or checkpoint.framework
    conditions = parse_gate(gate)
    passed, reasons = check_gate(conditions, metrics)
    current = read_pointer(root, pipeline, alias)
    previous = CheckpointRef.from_dict(current["checkpoint"]) if current else None
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    entry_uri = _store.sub(root, _store.clean_name(pipeline, "pipeline"), HISTORY_DIR, alias,
                           f"{stamp}-{uuid.uuid4().hex[:8]}.json")
    record = {"alias": alias, "pipeline": pipeline, "decision":
              "promoted" if passed else "rejected", "decided_at": now,
              "checkpoint": checkpoint.to_dict(), "metrics": scalar_metrics(metrics),
              "gate": dict(gate or {}), "reasons": reasons,
              "previous": previous.to_dict() if previous else None}
    st = Storage.from_path(entry_uri)
    st.write_json_atomic(st.root, record)
    pointer = pointer_uri(root, pipeline, alias)
    if passed:
        record = dict(record, entry=redact(entry_uri))
        pst = Storage.from_path(pointer)
        pst.write_json_atomic(pst.root, record)
    return Promotion(promoted=passed, alias=alias, pipeline=pipeline, checkpoint=checkpoint,
                     reasons=reasons, pointer_uri=redact(pointer),
                     entry_uri=redact(entry_uri), previous=previous)


def history(root: str, pipeline: str, alias: str) -> List[Dict[str, Any]]:
    """Every decision for an alias, oldest first."""
    directory = _store.sub(root, _store.clean_name(pipeline, "pipeline"), HISTORY_DIR, alias)
    st = Storage.from_path(directory)
    inner = st.root
    out = []
    for name in st.list_dir(inner):
        if name.endswith(".json") and not name.startswith("."):
            data = st.read_json(join(inner, name))
            if data is not None:
                out.append(data)
    return sorted(out, key=lambda d: d.get("decided_at", 0))


def scalar_metrics(metrics: Dict[str, Any]) -> Dict[str, Any]:
    """The number/str/bool/None values of a metrics dict (no matrices, no lists)."""
    return {k: v for k, v in metrics.items()
            if v is None or isinstance(v, (int, float, str, bool))}
