"""Promotion gates: conditions over evaluation metrics, checked against fixed bounds or
against the champion (the model the alias points at now), and the decision they make.
"""

from __future__ import annotations

import math
import operator
import re
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

from engine.exceptions import ConfigError
from tasks.refs import CheckpointRef, Promotion
from tasks.registry.base import Registry

CHAMPION = "champion"
_NUMBER = r"[-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|nan|inf)"
_COND_RE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\S.*?)\s*$")
_NUMBER_RE = re.compile(rf"^{_NUMBER}$")
_CHAMPION_RE = re.compile(rf"^{CHAMPION}\s*(?:([-+*])\s*({_NUMBER}))?$")
_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
        "==": operator.eq, "!=": operator.ne}
_HOW = ("write an operator and a number or 'champion' as a string, e.g. "
        "{'accuracy': ['>=0.9', '>=champion'], 'log_loss': '<=champion-0.01', "
        "'f1': '>=champion*0.99'}")


@dataclass(frozen=True)
class ChampionBound:
    """The bound of a champion condition: the champion's value of the metric, shifted
    (``champion-0.01``: ``op="-"``) or scaled (``champion*0.99``: ``op="*"``)."""

    op: str = "+"
    value: float = 0.0

    def of(self, champion: float) -> float:
        return champion * self.value if self.op == "*" else (
            champion - self.value if self.op == "-" else champion + self.value)

    def __str__(self) -> str:
        if self.op != "*" and self.value == 0:
            return CHAMPION
        return f"{CHAMPION}{self.op}{self.value:g}"


Bound = Union[float, ChampionBound]
Condition = Tuple[str, str, Bound]


def parse_gate(gate: Optional[Dict[str, Any]]) -> List[Condition]:
    """``{"accuracy": [">=0.9", ">=champion"]}`` → ``[("accuracy", ">=", 0.9),
    ("accuracy", ">=", ChampionBound())]``.

    A metric takes one condition or a list of them (all must hold). A condition is an
    operator (``>= > <= < == !=``) and a number, or ``champion`` — the current holder of
    the alias, evaluated on the same data — optionally ``-x``, ``+x`` or ``*x``.

    Raises:
        ConfigError: a condition that is neither (e.g. ``>=champoin``); nothing has been
            evaluated yet.
    """
    if gate is None:
        return []
    if not isinstance(gate, dict):
        raise ConfigError(f"gate must be a dict like {{'accuracy': '>=0.9'}}, got {gate!r}.")
    out: List[Condition] = []
    for metric, conds in gate.items():
        for cond in conds if isinstance(conds, (list, tuple)) else [conds]:
            out.append((str(metric), *_parse_condition(metric, cond)))
    return out


def _parse_condition(metric: Any, cond: Any) -> Tuple[str, Bound]:
    match = _COND_RE.match(cond) if isinstance(cond, str) else None
    operand = match.group(2) if match else ""
    if match and _NUMBER_RE.match(operand):
        return match.group(1), float(operand)
    champion = _CHAMPION_RE.match(operand) if match else None
    if champion is None:
        raise ConfigError(f"gate[{metric!r}] = {cond!r} is not a condition: {_HOW}.")
    op, value = champion.group(1) or "+", champion.group(2)
    return match.group(1), ChampionBound(op, float(value) if value else (
        1.0 if op == "*" else 0.0))


def has_champion_condition(conditions: List[Condition]) -> bool:
    return any(isinstance(bound, ChampionBound) for _, _, bound in conditions)


def _number(value: Any) -> Optional[float]:
    """``value`` as a defined number, or None (None, NaN, text, booleans)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and not math.isnan(value):
        return float(value)
    return None


def _shown(value: Any) -> str:
    return "undefined" if value is None else f"{value:.6g}" if isinstance(
        value, (int, float)) else repr(value)


def check_gate(conditions: List[Condition], metrics: Dict[str, Any],
               champion: Optional[Dict[str, Any]] = None) -> Tuple[bool, List[str]]:
    """Whether every condition holds, with one line per condition. A metric that is
    None or NaN (undefined on this data) fails its condition.

    Args:
        champion: The champion's metrics on the same data; None: there is no champion
            (yet), and every champion condition passes, saying so.

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
        value = _number(metrics[metric])
        shown_bound = str(bound) if isinstance(bound, ChampionBound) else f"{bound:g}"
        head = f"{metric} {_shown(metrics[metric])} {op} {shown_bound}"
        if not isinstance(bound, ChampionBound):
            ok = value is not None and _OPS[op](value, bound)
            note = ""
        elif champion is None:
            ok, note = True, " (no champion yet)"
        elif _number(champion.get(metric)) is None:
            ok, note = True, f" (the champion's {metric} is undefined on this data)"
        else:
            limit = bound.of(_number(champion[metric]))  # type: ignore[arg-type]
            ok = value is not None and _OPS[op](value, limit)
            note = f" (champion {_shown(champion[metric])}: {op} {limit:.6g})"
        passed &= ok
        reasons.append(f"{head}: {'pass' if ok else 'FAIL'}{note}")
    return passed, reasons


def decide(checkpoint: CheckpointRef, metrics: Dict[str, Any], alias: str,
           gate: Optional[Dict[str, Any]], registry: Registry,
           previous: Optional[CheckpointRef] = None,
           champion: Optional[Dict[str, Any]] = None,
           context: Optional[Dict[str, Any]] = None) -> Promotion:
    """Check the gate, record the decision, and move the alias if it passed.

    Args:
        registry: Where the decision is recorded (a :class:`~tasks.registry.base.Registry`).
        previous: What the alias points at now (the champion), if anything.
        champion: The champion's metrics on the candidate's data (None: no champion, or
            the gate has no champion condition).
        context: Where the decision came from (engine run, orchestrator run id).
    """
    pipeline = checkpoint.pipeline or checkpoint.framework
    passed, reasons = check_gate(parse_gate(gate), metrics, champion)
    record = {"alias": alias, "pipeline": pipeline, "decision":
              "promoted" if passed else "rejected", "decided_at": time.time(),
              "checkpoint": checkpoint.to_dict(), "metrics": scalar_metrics(metrics),
              "champion_metrics": scalar_metrics(champion) if champion else None,
              "gate": dict(gate or {}), "reasons": reasons,
              "previous": previous.to_dict() if previous else None}
    pointer, entry = registry.record(record, dict(context or {}))
    return Promotion(promoted=passed, alias=alias, pipeline=pipeline, checkpoint=checkpoint,
                     reasons=reasons, pointer_uri=pointer, entry_uri=entry,
                     previous=previous, champion_metrics=record["champion_metrics"])


def scalar_metrics(metrics: Dict[str, Any]) -> Dict[str, Any]:
    """The number/str/bool/None values of a metrics dict (no matrices, no lists)."""
    return {k: v for k, v in metrics.items()
            if v is None or isinstance(v, (int, float, str, bool))}
