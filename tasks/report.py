"""The run report of a retraining: Markdown with the learning curve and confusion matrix.

    <storage>/reports/<pipeline>-<run id>/
        report.md             summary, tuning trials, validation metrics, promotion
        learning_curve.png    the final training run's curve (copied from its run dir)
        confusion_matrix.png  from the evaluation
        summary.json          the same facts as JSON
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Mapping, Optional

from engine import constants
from engine.storage import Storage, default_root, join
from tasks import layout
from tasks.refs import CheckpointRef, DatasetRef, Promotion, TuneRef

REPORT_FILE = "report.md"
SUMMARY_FILE = "summary.json"
_SHOWN_METRICS = ("accuracy", "precision", "recall", "f1", "roc_auc", "log_loss", "rmse",
                  "mae", "r2", "num_rows")


def report_dir(storage: Optional[str], pipeline: str, run_id: str) -> str:
    return layout.sub(default_root(storage), layout.REPORTS_DIR,
                      layout.clean_name(f"{pipeline}-{run_id}", "report name"))


def summarize(pipeline: str, checkpoint: CheckpointRef, metrics: Mapping[str, Any],
              promotion: Promotion, tuned: Optional[TuneRef] = None,
              predictions: Optional[DatasetRef] = None,
              production: Optional[CheckpointRef] = None,
              epochs_key: Optional[str] = "epochs") -> Dict[str, Any]:
    """The facts a person wants after a retraining, as JSON."""
    return {
        "pipeline": pipeline,
        "best_config": dict(tuned.best_config) if tuned else dict(checkpoint.config),
        "trained_config": dict(checkpoint.config),
        "epochs_key": epochs_key,
        "tune_metric": tuned.metric if tuned else None,
        "trials": len(tuned.trials) if tuned else 0,
        "validation": {k: metrics[k] for k in _SHOWN_METRICS if metrics.get(k) is not None},
        "checkpoint": checkpoint.uri,
        "run": checkpoint.run_uri,
        "final_epoch_metrics": checkpoint.metrics,
        "promoted": promotion.promoted,
        "gate": promotion.reasons,
        "production": production.uri if production else None,
        "predictions": predictions.uri if predictions else None,
        "predicted_rows": predictions.num_rows if predictions else None,
    }


def write_report(directory: str, summary: Mapping[str, Any], checkpoint: CheckpointRef,
                 metrics: Mapping[str, Any], tuned: Optional[TuneRef] = None) -> str:
    """Write ``report.md``, its PNGs and ``summary.json`` into ``directory``; return the
    report's location."""
    st = Storage.from_path(directory)
    root = st.root
    images = {}
    curve = layout.sub(checkpoint.run_uri or "", constants.PLOT_FILE) \
        if checkpoint.run_uri else None
    for name, src in (("learning_curve.png", curve),
                      ("confusion_matrix.png", metrics.get("confusion_matrix_path"))):
        if src and _copy(src, st, join(root, name)):
            images[name] = name
    st.write_json_atomic(join(root, SUMMARY_FILE), dict(summary))
    text = _markdown(summary, metrics, tuned, images)
    st.write_bytes_atomic(join(root, REPORT_FILE), text.encode("utf-8"))
    return st.display(join(root, REPORT_FILE))


def _copy(src: str, st: Any, dest: str) -> bool:
    source = Storage.from_path(src)
    if not source.exists(source.root):
        return False
    st.write_bytes_atomic(dest, source.read_bytes(source.root))
    return True


def _markdown(summary: Mapping[str, Any], metrics: Mapping[str, Any],
              tuned: Optional[TuneRef], images: Dict[str, str]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    out: List[str] = [f"# Retraining report: {summary['pipeline']}", "", f"_{when}_", ""]
    out += ["## Summary", "",
            f"- Best config (tuning): `{json.dumps(summary['best_config'], sort_keys=True)}`",
            f"- Trained with: `{json.dumps(summary['trained_config'], sort_keys=True)}`",
            f"- Checkpoint: `{summary['checkpoint']}`",
            f"- Promoted: **{'yes' if summary['promoted'] else 'no'}** "
            f"({'; '.join(summary['gate']) or 'no gate'})",
            f"- Production model: `{summary['production']}`",
            f"- Predictions: `{summary['predictions']}` ({summary['predicted_rows']} rows)",
            ""]
    out += ["## Validation metrics", "", "| metric | value |", "|---|---:|"]
    out += [f"| {k} | {_fmt(v)} |" for k, v in summary["validation"].items()]
    out.append("")
    if "learning_curve.png" in images:
        out += ["## Learning curve", "", "![learning curve](learning_curve.png)", ""]
    if "confusion_matrix.png" in images:
        out += ["## Confusion matrix", "", "![confusion matrix](confusion_matrix.png)", ""]
    if tuned and tuned.trials:
        cols = list(dict.fromkeys(k for row in tuned.trials for k in row if k != "error"))
        out += [f"## Tuning trials ({tuned.metric}, {tuned.mode})", "",
                "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        out += ["| " + " | ".join(_fmt(row.get(c)) for c in cols) + " |"
                for row in tuned.trials]
        out.append("")
    return "\n".join(out)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
