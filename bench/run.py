"""Run the benchmarks: ``python -m bench.run [--quick] [--only NAME ...] [--reps N]``.

For each workload, repetitions alternate ours, anchor, ours, anchor, ... (5 each by
default, 1 with ``--quick``, which also uses tiny sizes). "warm" workloads share one
local Ray started once here, ``ray.init(num_cpus=4, include_dashboard=False,
_node_ip_address="127.0.0.1")``; the others get a machine with no Ray running.

Writes ``<out>/latest.json`` (``--out``, else ``$BENCH_RESULTS_DIR``, else
``bench/results``) and prints a Markdown table. Exits 1 when a repetition failed, 0
otherwise: a missed target is reported, not an error.
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import importlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

from bench.core import (REGISTRY, REPO, Context, RssSampler, Workload, count_ray_objects,
                        loadavg, new_since, runner_maxrss_bytes, summarize, write_json)

# The workload modules: every ``bench/<name>.py`` that registers a workload. Modules
# that are not workloads (the harness itself, shared loops) are listed here; a new
# workload only needs its own file. The order is the table's order.
NOT_WORKLOADS = {"__init__", "core", "run", "ddp_loop",
                 "ray_job_overhead"}  # standalone: needs a cluster with a job server
FIRST = ["empty_fit", "report_latency", "ddp", "ingest", "checkpoint_save", "recovery",
         "tuner", "worker_reuse", "batch_predict"]


def _workload_modules() -> List[str]:
    here = Path(__file__).resolve().parent
    found = sorted(p.stem for p in here.glob("*.py")
                   if p.stem not in NOT_WORKLOADS and not p.stem.startswith("_"))
    ordered = [n for n in FIRST if n in found] + [n for n in found if n not in FIRST]
    return [f"bench.{n}" for n in ordered]


WORKLOAD_MODULES = _workload_modules()

RAY_INIT_KWARGS = dict(address="local", num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1")
SIDES = ("ours", "anchor")
SETTLE_S = 2.0
MB = 2 ** 20


def _parse(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="1 repetition and tiny sizes (a smoke run)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these workloads")
    p.add_argument("--reps", type=int, default=None,
                   help="repetitions per side (default 5, or 1 with --quick)")
    p.add_argument("--out", default=None,
                   help="results folder (default $BENCH_RESULTS_DIR or bench/results)")
    p.add_argument("--ray-logs", action="store_true",
                   help="forward worker logs to this terminal (log_to_driver=True)")
    p.add_argument("--keep-workdir", action="store_true",
                   help="keep the temporary run directories and subprocess logs")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    return p.parse_args(argv)


# --- Ray ------------------------------------------------------------------------------
def _ray_init_kwargs(ray_logs: bool) -> Dict[str, Any]:
    return dict(RAY_INIT_KWARGS, log_to_driver=ray_logs)


def _ensure_ray_mode(mode: str, ray_logs: bool) -> None:
    import ray

    if mode == "warm" and not ray.is_initialized():
        t0 = time.perf_counter()
        ray.init(**_ray_init_kwargs(ray_logs))
        print(f"# local Ray started in {time.perf_counter() - t0:.1f} s", flush=True)
    elif mode == "none" and ray.is_initialized():
        ray.shutdown()
        print("# local Ray shut down (this workload starts its own processes)", flush=True)


# --- one workload ---------------------------------------------------------------------
def _run_workload(w: Workload, args: argparse.Namespace, reps: int, tmp_root: Path,
                  rss: RssSampler) -> Dict[str, Any]:
    _ensure_ray_mode(w.ray_mode, args.ray_logs)
    if w.setup is not None:
        w.setup(args.quick)
    metric_names = {m.name for m in w.metrics}
    runs: Dict[str, List[Dict[str, Any]]] = {s: [] for s in SIDES}
    t_start = time.perf_counter()
    for rep in range(reps):
        for side in SIDES:
            fn = w.run_ours if side == "ours" else w.run_anchor
            workdir = tmp_root / w.name / f"{side}_{rep}"
            workdir.mkdir(parents=True)
            ctx = Context(quick=args.quick, rep=rep, side=side, workdir=workdir, rss=rss,
                          timeout_s=w.rep_timeout_s)
            before = count_ray_objects()
            record: Dict[str, Any] = {"rep": rep, "loadavg_before": loadavg()}
            # A hang would stall the whole run: dump every thread's stack and exit.
            faulthandler.dump_traceback_later(w.rep_timeout_s + 30, exit=True)
            rss.start()
            t0 = time.perf_counter()
            try:
                out = fn(ctx)
                record["metrics"] = {k: v for k, v in out.items() if k in metric_names}
                record["extra"] = {k: v for k, v in out.items() if k not in metric_names}
                missing = metric_names - set(record["metrics"])
                if missing:
                    raise RuntimeError(f"run_{side} returned no {sorted(missing)}")
            except Exception as exc:  # a failed repetition is recorded, the run goes on
                record["error"] = f"{type(exc).__name__}: {exc}"
                record["traceback"] = traceback.format_exc()
            finally:
                faulthandler.cancel_dump_traceback_later()
                peaks = rss.stop()
            record["rep_wall_s"] = time.perf_counter() - t0
            sub = peaks["subprocess_driver_peak_rss"]
            record["runner_peak_rss_mb"] = peaks["runner_peak_rss"] / MB
            record["subprocess_driver_peak_rss_mb"] = sub / MB if sub else None
            # The driver of this side: the launched process if there was one, else us.
            record["driver_peak_rss_mb"] = (sub or peaks["runner_peak_rss"]) / MB
            record["loadavg_after"] = loadavg()
            after = count_ray_objects()
            child = record.get("extra", {}).get("child_ray_objects_after_fit")
            if child:  # the side ran its own Ray in a child process: all of it is new
                after = dict(child, counted_in="child process, right after fit()")
                record["ray_objects_left"] = {"actors": child["actors_alive"],
                                              "placement_groups": child["placement_groups_alive"]}
            else:
                record["ray_objects_left"] = new_since(before, after)
            record["ray_objects_after"] = _brief(after)
            runs[side].append(record)
            _print_progress(w, rep, reps, side, record)
    final_objects = None
    import ray

    if ray.is_initialized():
        time.sleep(SETTLE_S)
        final_objects = _brief(count_ray_objects())
    return _aggregate(w, args, reps, runs, final_objects, time.perf_counter() - t_start)


def _brief(objs: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in objs.items() if k not in ("actor_ids", "placement_group_ids")}


def _print_progress(w: Workload, rep: int, reps: int, side: str, rec: Dict[str, Any]) -> None:
    if "error" in rec:
        body = "ERROR " + rec["error"].splitlines()[0][:300]
    else:
        body = " ".join(f"{k}={_fmt(v)}" for k, v in rec["metrics"].items())
    objs = rec["ray_objects_after"]
    left = rec["ray_objects_left"]
    print(f"[{w.name}] rep {rep + 1}/{reps} {side:6s} {body}  "
          f"(driver peak RSS {rec['driver_peak_rss_mb']:.0f} MB; Ray actors/PGs alive after "
          f"{_fmt(objs.get('actors_alive'))}/{_fmt(objs.get('placement_groups_alive'))}, "
          f"new {_fmt(left['actors'])}/{_fmt(left['placement_groups'])}; "
          f"load {rec['loadavg_before']}→{rec['loadavg_after']})", flush=True)
    extra = rec.get("extra", {})
    steps = extra.get("breakdown_s")
    if steps:  # where a whole process's seconds went (the engine's timeline)
        print("    " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()), flush=True)
    if extra.get("loop_machine_cpu_s") is not None:  # who used the CPUs during the loop
        by_kind = extra.get("loop_cpu_by_kind") or {}
        kinds = ", ".join(f"{k} {v:.2f}" for k, v in by_kind.items())
        print(f"    during the loop: machine {_fmt(extra['loop_machine_cpu_s'])} CPU-s, "
              f"ranks {_fmt(extra.get('loop_ranks_cpu_s'))}, "
              f"the rest {_fmt(extra.get('loop_others_cpu_s'))} ({kinds})", flush=True)


def _aggregate(w: Workload, args: argparse.Namespace, reps: int,
               runs: Dict[str, List[Dict[str, Any]]], final_objects: Optional[Dict[str, Any]],
               wall: float) -> Dict[str, Any]:
    metrics = []
    for m in w.metrics:
        per_side = {s: summarize([r["metrics"][m.name] for r in runs[s] if "metrics" in r
                                  and r["metrics"].get(m.name) is not None])
                    for s in SIDES}
        o, a = per_side["ours"]["median"], per_side["anchor"]["median"]
        ratio = o / a if o is not None and a not in (None, 0) else None
        metrics.append({
            "name": m.name, "unit": m.unit, "description": m.description,
            "ours": per_side["ours"], "anchor": per_side["anchor"], "ratio": ratio,
            "target": None if m.target is None else {
                "kind": m.target.kind, "value": m.target.value, "text": m.target.text(m.unit)},
            "pass": None if m.target is None else m.target.check(o, ratio),
        })
    resources = {}
    for s in SIDES:
        ok = runs[s]
        last = ok[-1]["ray_objects_after"] if ok else {}

        def _max_left(key: str) -> Optional[int]:
            vals = [r["ray_objects_left"][key] for r in ok
                    if r["ray_objects_left"][key] is not None]
            return max(vals) if vals else None

        resources[s] = {
            "driver_peak_rss_mb": max((r["driver_peak_rss_mb"] for r in ok), default=None),
            "runner_peak_rss_mb": max((r["runner_peak_rss_mb"] for r in ok), default=None),
            "actors_alive_after": last.get("actors_alive"),
            "placement_groups_alive_after": last.get("placement_groups_alive"),
            "new_actors_left_per_rep_max": _max_left("actors"),
            "new_placement_groups_left_per_rep_max": _max_left("placement_groups"),
            "ray_objects_after_last_rep": last,
        }
    errors = [{"side": s, "rep": r["rep"], "error": r["error"], "traceback": r["traceback"]}
              for s in SIDES for r in runs[s] if "error" in r]
    return {
        "name": w.name, "description": w.description, "anchor": w.anchor,
        "ray_mode": w.ray_mode, "reps": reps, "quick": args.quick,
        "sizes": w.sizes(args.quick) if w.sizes else {}, "notes": w.notes,
        "wall_s": wall, "metrics": metrics, "resources": resources,
        "ray_objects_after_workload": final_objects,
        "ray_objects_settle_s": SETTLE_S if final_objects is not None else None,
        "runs": runs, "errors": errors,
    }


# --- report -----------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.3g}"
    return str(v)


def _rows(workloads: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    rows = []
    for name, w in workloads.items():
        for m in w["metrics"]:
            rows.append({
                "workload": name, "metric": m["name"], "unit": m["unit"],
                "ours": {k: m["ours"][k] for k in ("median", "min", "max", "n")},
                "anchor": {k: m["anchor"][k] for k in ("median", "min", "max", "n")},
                "ratio": m["ratio"], "target": m["target"]["text"] if m["target"] else None,
                "pass": m["pass"],
            })
    return rows


def _markdown(rows: List[Dict[str, Any]], workloads: Dict[str, Dict[str, Any]]) -> str:
    out = ["| workload | metric | ours median | ours min | ours max | anchor median | "
           "anchor min | anchor max | ours/anchor | target | pass |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        unit = f" ({r['unit']})" if r["unit"] else ""
        verdict = {True: "PASS", False: "FAIL", None: "—" if r["target"] is None else "n/a"}
        out.append(
            f"| {r['workload']} | {r['metric']}{unit} | {_fmt(r['ours']['median'])} | "
            f"{_fmt(r['ours']['min'])} | {_fmt(r['ours']['max'])} | "
            f"{_fmt(r['anchor']['median'])} | {_fmt(r['anchor']['min'])} | "
            f"{_fmt(r['anchor']['max'])} | {_fmt(r['ratio'])} | {r['target'] or '—'} | "
            f"{verdict[r['pass']]} |")
    out += ["", "Ray actors / placement groups alive right after a repetition (in brackets: "
                "new ones that repetition left, max over repetitions):", "",
            "| workload | side | driver peak RSS (MB) | Ray actors alive after | "
            "placement groups alive after |", "|---|---|---:|---:|---:|"]
    for name, w in workloads.items():
        for s in SIDES:
            res = w["resources"][s]
            out.append(
                f"| {name} | {s} | {_fmt(res['driver_peak_rss_mb'])} | "
                f"{_fmt(res['actors_alive_after'])} (+{_fmt(res['new_actors_left_per_rep_max'])}) | "
                f"{_fmt(res['placement_groups_alive_after'])} "
                f"(+{_fmt(res['new_placement_groups_left_per_rep_max'])}) |")
        fin = w.get("ray_objects_after_workload")
        if fin:
            classes = ", ".join(f"{k}×{v}" for k, v in sorted(fin["actor_classes"].items()))
            out.append(f"| {name} | end (+{SETTLE_S:g} s) | — | "
                       f"{_fmt(fin['actors_alive'])}{' (' + classes + ')' if classes else ''}"
                       f" | {_fmt(fin['placement_groups_alive'])} |")
    return "\n".join(out)


def _machine() -> Dict[str, Any]:
    info: Dict[str, Any] = {
        "hostname": platform.node(), "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count_logical": os.cpu_count(), "python": platform.python_version(),
    }
    try:
        import psutil

        info["cpu_count_physical"] = psutil.cpu_count(logical=False)
        info["memory_gb"] = round(psutil.virtual_memory().total / 2 ** 30, 1)
    except Exception:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    for mod in ("ray", "torch"):
        try:
            info[f"{mod}_version"] = importlib.import_module(mod).__version__
        except Exception:
            info[f"{mod}_version"] = None
    try:
        from ray.train.v2._internal.constants import is_v2_enabled

        info["ray_train_v2_enabled"] = is_v2_enabled()
    except Exception:
        info["ray_train_v2_enabled"] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "engine"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        info["git_commit"] = commit or None
        info["engine_dirty"] = bool(dirty)
    except Exception:
        pass
    return info


def main(argv: Optional[List[str]] = None) -> int:
    args = _parse(argv)
    for mod in WORKLOAD_MODULES:
        importlib.import_module(mod)
    if args.list:
        for name, w in REGISTRY.items():
            opt_in = "" if w.in_default else "  (only with --only)"
            print(f"{name:16s} {w.description}  [anchor: {w.anchor}]{opt_in}")
        return 0
    names = [n for n, w in REGISTRY.items() if w.in_default]
    if args.only:
        unknown = [n for n in args.only if n not in REGISTRY]
        if unknown:
            print(f"unknown workload(s) {unknown}; known: {list(REGISTRY)}", file=sys.stderr)
            return 2
        names = [n for n in REGISTRY if n in args.only]
    reps = args.reps if args.reps is not None else (1 if args.quick else 5)
    if reps < 1:
        print("--reps must be ≥ 1", file=sys.stderr)
        return 2
    out_dir = Path(args.out or os.environ.get("BENCH_RESULTS_DIR") or REPO / "bench" / "results")
    out_dir.mkdir(parents=True, exist_ok=True)
    # Always a fresh local Ray of our own, never a cluster from the environment.
    ray_address = os.environ.pop("RAY_ADDRESS", None)
    tmp_root = Path(tempfile.mkdtemp(prefix="trainyard_bench_"))
    rss = RssSampler()
    started = datetime.datetime.now().astimezone()
    load_start = loadavg()
    print(f"# trainyard bench: {names}, {reps} rep(s) per side"
          f"{', quick sizes' if args.quick else ''}; work dir {tmp_root}", flush=True)
    workloads: Dict[str, Dict[str, Any]] = {}
    try:
        for name in names:
            workloads[name] = _run_workload(REGISTRY[name], args, reps, tmp_root, rss)
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if not args.keep_workdir:
            shutil.rmtree(tmp_root, ignore_errors=True)
    rows = _rows(workloads)
    table = _markdown(rows, workloads)
    result = {
        "schema": 1,
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, "-m", "bench.run"] + list(
            argv if argv is not None else sys.argv[1:])),
        "quick": args.quick, "reps": reps, "order": "alternating: ours, anchor, ours, ...",
        "machine": _machine(),
        "ray_init": {k: v for k, v in _ray_init_kwargs(args.ray_logs).items()},
        "ray_address_ignored": ray_address,
        "actor_count_method": next(
            (w["ray_objects_after_workload"]["method"] for w in workloads.values()
             if w.get("ray_objects_after_workload")), None),
        "runner_lifetime_maxrss_mb": runner_maxrss_bytes() / MB,
        "loadavg_start": load_start, "loadavg_end": loadavg(),
        "rows": rows,
        "workloads": workloads,
        "table_markdown": table,
        "work_dir": str(tmp_root) if args.keep_workdir else None,
    }
    path = out_dir / "latest.json"
    write_json(path, result)
    print()
    print(table)
    print(f"\n(written to {path})")
    failed = [(n, e["side"], e["rep"], e["error"]) for n, w in workloads.items()
              for e in w["errors"]]
    for n, side, rep, err in failed:
        print(f"ERROR {n} {side} rep {rep}: {err.splitlines()[0]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
