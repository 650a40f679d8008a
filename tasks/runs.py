"""Reading runs back from storage: what ``trainyard runs`` and ``trainyard show`` print.

A run is a directory with ``run_state.json`` (a training run) or ``tuner_state.json`` (a
tuning experiment, whose trials are runs) under ``<storage>/runs/`` or directly under
``<storage>/`` (where a plain ``fit()`` with that ``storage_path`` puts it).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from engine import constants
from engine.storage import Storage, default_root, join, redact
from tasks import layout

TUNER_STATE_FILE = "tuner_state.json"


class RunNotFoundError(LookupError):
    """No run of that name under the storage root."""

    def __str__(self) -> str:
        return str(self.args[0])


def _roots(storage: Optional[str]) -> List[Tuple[Storage, str]]:
    root = default_root(storage)
    roots = (Storage.from_path(layout.sub(root, layout.RUNS_DIR)), Storage.from_path(root))
    return [(st, st.root) for st in roots]


def list_runs(storage: Optional[str] = None) -> List[Dict[str, Any]]:
    """One summary per run and tuning experiment, newest first."""
    out: List[Dict[str, Any]] = []
    for st, parent in _roots(storage):
        for name in st.list_dir(parent):
            summary = _summary(st, join(parent, name), name)
            if summary is not None:
                out.append(summary)
    return sorted(out, key=lambda r: r.get("updated_at") or 0, reverse=True)


def show_run(name: str, storage: Optional[str] = None) -> Dict[str, Any]:
    """The details of one run: its summary, config, checkpoints, last metrics, error;
    for a tuning experiment, its trials.

    Raises:
        RunNotFoundError: no run of that name (the message lists some that exist).
    """
    for st, parent in _roots(storage):
        path = join(parent, name)
        summary = _summary(st, path, name)
        if summary is None:
            continue
        if summary["kind"] == "tune":
            summary["trials"] = _trials(st, path, summary)
            return summary
        data = st.read_json(join(path, constants.RUN_STATE_FILE)) or {}
        summary.update(
            config=data.get("config"), error=data.get("error"),
            last_restore=data.get("last_restore"),
            last_metrics=_user_metrics((data.get("history") or [{}])[-1]),
            checkpoints=[{"dir": c["dir_name"], "iteration": c["iteration"],
                          **_user_metrics(c.get("metrics") or {})}
                         for c in (data.get("checkpoints") or {}).get("checkpoints", [])])
        return summary
    known = [r["name"] for r in list_runs(storage)][:10]
    raise RunNotFoundError(f"No run {name!r} under {redact(default_root(storage))}"
                           f" (runs there: {known or 'none'}); pass --storage to look "
                           "elsewhere.")


def _summary(st: Storage, path: str, name: str) -> Optional[Dict[str, Any]]:
    data = st.read_json(join(path, constants.RUN_STATE_FILE))
    if data is not None:
        metric, mode = _metric_of(st, path, data)
        history = data.get("history") or []
        return {"name": name, "kind": "train", "path": st.display(path),
                "state": data.get("state"), "trainer": data.get("trainer"),
                "iterations": history[-1].get("training_iteration") if history else 0,
                "metric": metric, "mode": mode, "best": _best(history, metric, mode),
                "failures": data.get("failures", 0), "restores": data.get("restores", 0),
                "updated_at": data.get("updated_at") or data.get("created_at")}
    tuner = st.read_json(join(path, TUNER_STATE_FILE))
    if tuner is None:
        return None
    trials = tuner.get("trials") or []
    statuses = sorted({t.get("status", "?") for t in trials})
    metric, mode = tuner.get("metric"), tuner.get("mode")
    states = [st.read_json(join(path, t["dirname"], constants.RUN_STATE_FILE))
              for t in trials if t.get("dirname")]
    bests = [_best(s.get("history") or [], metric, mode) for s in states if s]
    bests = [b for b in bests if b is not None]
    best = (max(bests) if mode == "max" else min(bests)) if bests else None
    updated = max([s.get("updated_at") or 0 for s in states if s] or [0]) or None
    return {"name": name, "kind": "tune", "path": st.display(path),
            "state": "/".join(statuses) or "EMPTY", "trainer": None,
            "iterations": len(trials), "metric": metric, "mode": mode, "best": best,
            "failures": sum((s or {}).get("failures", 0) for s in states),
            "restores": sum((s or {}).get("restores", 0) for s in states),
            "updated_at": updated}


def _trials(st: Storage, path: str, summary: Dict[str, Any]) -> List[Dict[str, Any]]:
    tuner = st.read_json(join(path, TUNER_STATE_FILE)) or {}
    rows = []
    for t in tuner.get("trials") or []:
        state = st.read_json(join(path, t.get("dirname", ""),
                                           constants.RUN_STATE_FILE)) or {}
        history = state.get("history") or []
        params = {k.rsplit("/", 1)[-1]: v
                  for k, v in (t.get("evaluated_params") or {}).items()}
        rows.append({"trial": t.get("trial_name"), "status": t.get("status"),
                     "config": params or t.get("config"),
                     "iterations": history[-1].get("training_iteration") if history else 0,
                     summary["metric"] or "best": _best(history, summary["metric"],
                                                        summary["mode"])})
    return rows


def _metric_of(st: Storage, path: str, data: Dict[str, Any]
               ) -> Tuple[Optional[str], Optional[str]]:
    """The pipeline metric of a run, from a checkpoint's model card."""
    for ckpt in reversed((data.get("checkpoints") or {}).get("checkpoints", [])):
        card = st.read_json(join(path, ckpt["dir_name"], constants.MODEL_CARD_FILE))
        pipeline = ((card or {}).get("metadata") or {}).get("pipeline")
        if pipeline:
            try:
                from pipelines import get_pipeline

                spec = get_pipeline(pipeline)
                return spec.metric, spec.mode
            except (LookupError, ValueError):  # unknown, or a plugin that cannot load
                break
    return None, None


def _best(history: List[Dict[str, Any]], metric: Optional[str], mode: Optional[str]
          ) -> Optional[float]:
    if not metric:
        return None
    values = [h[metric] for h in history if isinstance(h.get(metric), (int, float))
              and not isinstance(h.get(metric), bool) and math.isfinite(h[metric])]
    if not values:
        return None
    return max(values) if mode != "min" else min(values)


def _user_metrics(row: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in row.items()
            if k not in constants.AUTOMATIC_FIELDS or k == "training_iteration"}
