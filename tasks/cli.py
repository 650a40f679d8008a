"""``trainyard``: ad-hoc pipeline runs and a look at what storage holds.

    trainyard pipelines                         pipelines found, and where from
    trainyard new-pipeline churn --framework xgboost   a package for your own model
    trainyard run digits --workers 2 --epochs 5 ingest → split → train → evaluate
    trainyard run digits --name nightly         the same name resumes that run
    trainyard runs                              runs in storage: state, best metric
    trainyard show digits-train-...             one run: config, checkpoints, metrics
    trainyard notifications --webhook URL       Prefect: failed runs and rejected models
                                                post to URL (a webhook block + automations)

``--storage`` (default ``$TRAINYARD_STORAGE_PATH`` or ``~/trainyard_results``) may be a
local path or ``s3://bucket/prefix``. ``--json`` prints machine-readable output.
Scheduled retraining with promotion is the Prefect flow: ``python -m flows.retrain``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from engine.exceptions import TrainyardError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainyard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--storage", default=None,
                        help="storage root (default $TRAINYARD_STORAGE_PATH or "
                             "~/trainyard_results)")
    common.add_argument("--json", action="store_true", help="print JSON")

    run = sub.add_parser("run", parents=[common], help="train a pipeline now")
    run.add_argument("pipeline", help="a registered pipeline (see `trainyard pipelines`)")
    run.add_argument("--workers", type=int, default=2, help="training workers (default 2)")
    run.add_argument("--epochs", type=int, default=None,
                     help="epochs / boosting rounds (default: the pipeline's)")
    run.add_argument("--source", default=None, help="data (default: the pipeline's)")
    run.add_argument("--name", default=None, help="run name; an existing one resumes")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="a hyperparameter (JSON value), e.g. --set lr=0.01")
    run.add_argument("--test-size", type=float, default=0.2)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--max-failures", type=int, default=0,
                     help="worker-group restarts before the run fails (default 0)")

    sub.add_parser("runs", parents=[common], help="list runs in storage")
    show = sub.add_parser("show", parents=[common], help="details of one run")
    show.add_argument("run", help="run name (as `trainyard runs` lists it)")
    sub.add_parser("pipelines", parents=[common],
                   help="list pipelines: built in, installed plugins, $TRAINYARD_PIPELINES")
    new = sub.add_parser("new-pipeline", help="write a package for your own pipeline")
    new.add_argument("name", help="pipeline name (lower-case letters, digits, _)")
    new.add_argument("--framework", required=True,
                     choices=["torch", "xgboost", "lightgbm", "sklearn", "tensorflow"])
    new.add_argument("--dir", default=None,
                     help="project directory to create (default ./<name>-pipeline)")
    notes = sub.add_parser(
        "notifications", help="Prefect: send failed flow runs and rejected models to a "
                              "webhook (creates a webhook block and two automations)")
    notes.add_argument("--webhook", required=True, help="URL that receives a JSON POST "
                       '{"subject": ..., "body": ...} per notification')
    notes.add_argument("--block", default=NOTIFY_BLOCK,
                       help=f"name of the Custom Webhook block (default {NOTIFY_BLOCK})")
    return parser


#: The Prefect objects ``trainyard notifications`` creates (again: it replaces them).
NOTIFY_BLOCK = "trainyard-webhook"
FAILED_AUTOMATION = "trainyard: flow run failed"
REJECTED_AUTOMATION = "trainyard: model rejected"
#: The flows whose failed or crashed runs notify.
NOTIFIED_FLOWS = ["retrain", "batch-predict"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``trainyard`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    if getattr(args, "storage", None) and "://" not in args.storage:
        args.storage = os.path.abspath(os.path.expanduser(args.storage))
    try:
        return {"run": _run, "runs": _runs, "show": _show, "pipelines": _pipelines,
                "new-pipeline": _new_pipeline,
                "notifications": _notifications}[args.command](args)
    except (TrainyardError, LookupError, ValueError) as exc:
        print(f"trainyard {args.command}: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from pipelines import get_pipeline
    from tasks import steps

    spec = get_pipeline(args.pipeline)
    config = _overrides(args.set)
    if args.epochs is not None:
        if not spec.epochs_key:
            raise ValueError(f"Pipeline {spec.name!r} ({spec.framework}) has no epochs: drop "
                             "--epochs (set its hyperparameters with --set KEY=VALUE).")
        config[spec.epochs_key] = args.epochs
    data = steps.ingest(args.source or spec.source, storage=args.storage)
    spec.check_columns(data.columns)
    stratify = spec.label_column if spec.task == "classification" else None
    splits = steps.split(data, args.test_size, args.seed, stratify)
    name = args.name or f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    ckpt = steps.train(spec.name, splits, {"num_workers": args.workers},
                      {"name": name, "storage": args.storage, "config": config,
                       "max_failures": args.max_failures, "verbose": 0 if args.json else 1})
    metrics = steps.evaluate(ckpt, splits["validation"])
    out = {"run": ckpt.run_name, "run_dir": ckpt.run_uri, "checkpoint": ckpt.uri,
           "config": ckpt.config, "validation": _scalars(metrics),
           "confusion_matrix": metrics.get("confusion_matrix_path")}
    if args.json:
        print(json.dumps(out, indent=1, sort_keys=True))
        return 0
    shown = ", ".join(f"{k} {v:.4f}" for k, v in out["validation"].items()
                      if isinstance(v, float))
    print(f"run:        {out['run']}  ({out['run_dir']})")
    print(f"checkpoint: {out['checkpoint']}")
    print(f"validation: {shown}")
    if out["confusion_matrix"]:
        print(f"confusion matrix: {out['confusion_matrix']}")
    return 0


def _overrides(items: List[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: write KEY=VALUE, e.g. --set lr=0.01")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _scalars(metrics: Dict[str, Any]) -> Dict[str, Any]:
    keys = ("accuracy", "precision", "recall", "f1", "roc_auc", "log_loss", "rmse", "mae",
            "r2", "num_rows")
    return {k: metrics[k] for k in keys if metrics.get(k) is not None}


def _runs(args: argparse.Namespace) -> int:
    from tasks.runs import list_runs

    runs = list_runs(args.storage)
    if args.json:
        print(json.dumps(runs, indent=1, sort_keys=True))
        return 0
    if not runs:
        print("No runs in this storage (try --storage).")
        return 0
    rows = [["NAME", "KIND", "STATE", "ITER", "BEST", "RESTORES", "UPDATED"]]
    for r in runs:
        best = "-" if r["best"] is None else f"{r['metric']} {r['best']:.4g}"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["updated_at"])) \
            if r.get("updated_at") else "-"
        rows.append([r["name"], r["kind"], str(r["state"]), str(r["iterations"]), best,
                     str(r["restores"]), when])
    _table(rows)
    return 0


def _show(args: argparse.Namespace) -> int:
    from tasks.runs import show_run

    run = show_run(args.run, args.storage)
    if args.json:
        print(json.dumps(run, indent=1, sort_keys=True, default=str))
        return 0
    for key in ("name", "kind", "path", "state", "trainer", "iterations", "failures",
                "restores"):
        print(f"{key + ':':12}{run.get(key)}")
    if run.get("best") is not None:
        print(f"{'best:':12}{run['metric']} {run['best']:.6g} ({run['mode']})")
    for key in ("config", "last_metrics", "last_restore"):
        if run.get(key):
            print(f"{key + ':':12}{json.dumps(run[key], sort_keys=True, default=str)}")
    for ckpt in run.get("checkpoints") or []:
        print(f"  {ckpt['dir']}  iteration {ckpt['iteration']}  "
              + " ".join(f"{k}={_fmt(v)}" for k, v in ckpt.items()
                         if k not in ("dir", "iteration")))
    if run.get("trials"):
        cols = list(run["trials"][0])
        _table([cols] + [[_fmt(t.get(c)) for c in cols] for t in run["trials"]])
    if run.get("error"):
        print("error:\n" + run["error"])
    return 0


def _pipelines(args: argparse.Namespace) -> int:
    from pipelines import pipeline_entries

    rows = pipeline_entries()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    _table([["NAME", "FRAMEWORK", "METRIC", "FROM", "DESCRIPTION"]]
           + [[r["name"], r["framework"] or "-",
               f"{r['metric']} ({r['mode']})" if r["metric"] else "-", r["origin"],
               f"ERROR: {r['error']}" if r["error"] else (r["description"] or "-")]
              for r in rows])
    broken = [r["name"] for r in rows if r["error"]]
    if broken:
        print(f"{len(broken)} pipeline(s) cannot be used: {', '.join(broken)} (see ERROR "
              "above); the others work.", file=sys.stderr)
    return 0


def _new_pipeline(args: argparse.Namespace) -> int:
    from pipelines.scaffold import distribution_name, package_name, write_scaffold

    root = write_scaffold(args.name, args.framework, args.dir)
    print(f"Wrote the {args.name} pipeline ({args.framework}) to {root}:")
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        print(f"  {path.relative_to(root)}")
    print(f"""
Next:
  cd {root}
  pytest                        # trains it one epoch through trainyard's tasks
  pip install -e .              # the entry point: trainyard now finds {args.name!r}
  trainyard run {args.name}
Edit {package_name(args.name)}/pipeline.py for your model and data; the distribution is
{distribution_name(args.name)!r}. README.md has the Prefect and Airflow commands.""")
    return 0


def _notifications(args: argparse.Namespace) -> int:
    """Save the webhook block, then (re)create the automations that send to it, on the
    Prefect API of ``PREFECT_API_URL`` (the server's automations service sends)."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    api = PREFECT_API_URL.value()
    if not api:
        raise ValueError("set PREFECT_API_URL to your Prefect server's API (e.g. "
                         "http://127.0.0.1:4200/api after `prefect server start`): "
                         "automations run on a server, not on the ephemeral one.")
    try:
        return _save_notifications(args)
    except (httpx.HTTPError, OSError) as exc:
        raise ValueError(f"cannot reach the Prefect API at {api} ({exc}): start the "
                         "server or fix PREFECT_API_URL.") from exc


def _save_notifications(args: argparse.Namespace) -> int:
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    block = CustomWebhookNotificationBlock(
        name=args.block, url=args.webhook,
        json_data={"subject": "{{subject}}", "body": "{{body}}"})
    block_id = block.save(args.block, overwrite=True)
    ids = [_replace_automation(a) for a in _notify_automations(block_id)]
    print(f"Webhook block {args.block!r} ({block_id}) posts to {args.webhook}; automations "
          f"{FAILED_AUTOMATION!r} ({ids[0]}) and {REJECTED_AUTOMATION!r} ({ids[1]}) send "
          "to it.")
    return 0


def _notify_automations(block_id: Any) -> List[Any]:
    """A failed or crashed run of a trainyard flow; a ``trainyard.model.rejected`` event."""
    from prefect.automations import AutomationCore, EventTrigger, SendNotification

    failed = AutomationCore(
        name=FAILED_AUTOMATION,
        description="A trainyard flow run failed or crashed (trainyard notifications).",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Failed", "prefect.flow-run.Crashed"},
            match={"prefect.resource.id": "prefect.flow-run.*"},
            match_related={"prefect.resource.role": "flow",
                           "prefect.resource.name": NOTIFIED_FLOWS},
            posture="Reactive", threshold=1),
        actions=[SendNotification(
            block_document_id=block_id,
            subject="trainyard: {{ flow.name }} run {{ flow_run.name }} "
                    "{{ flow_run.state.name }}",
            body="Flow run {{ flow_run.name }} ({{ flow_run.id }}) of {{ flow.name }} ended "
                 "{{ flow_run.state.name }}: {{ flow_run.state.message }}\n"
                 "Parameters: {{ flow_run.parameters }}")])
    rejected = AutomationCore(
        name=REJECTED_AUTOMATION,
        description="promote turned a candidate down (trainyard notifications).",
        trigger=EventTrigger(expect={"trainyard.model.rejected"},
                             match={"prefect.resource.id": "trainyard.model.*"},
                             posture="Reactive", threshold=1),
        actions=[SendNotification(
            block_document_id=block_id,
            subject="trainyard: {{ event.payload.pipeline }}/{{ event.payload.alias }} "
                    "candidate rejected",
            body="Checkpoint {{ event.payload.checkpoint_uri }} was not promoted.\n"
                 "Gate: {{ event.payload.reasons | join('; ') }}\n"
                 "{{ event.payload.alias }} still points at {{ event.payload.previous }}")])
    return [failed, rejected]


def _replace_automation(automation: Any) -> Any:
    """Create ``automation``, deleting any of the same name first (a rerun replaces)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        for old in client.read_automations_by_name(automation.name):
            client.delete_automation(old.id)
        return client.create_automation(automation)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ",".join(f"{k}={_fmt(v)}" for k, v in value.items())
    return "-" if value is None else str(value)


def _table(rows: List[List[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


if __name__ == "__main__":
    sys.exit(main())
