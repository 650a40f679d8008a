"""How the GBDT and ingest ratios move as the data grows: the same jobs at 5M and 20M rows.

    python -m bench.scaling [--reps 3] [--quick] [--out bench/results]

runs, through ``bench.run`` (ours and the anchor alternating, fresh processes for the
GBDT sides), the base rows and their scaled copies:

* ``xgboost``, ``xgboost_5m``, ``xgboost_20m`` and the same for ``lightgbm``: the
  ``bench.xgboost`` / ``bench.lightgbm`` jobs (28 float32 features, 50 rounds, 2 workers
  against one process with 2 threads) on 500k, 5M and 20M training rows, validation a
  tenth of that;
* ``ingest_5m``, ``ingest``, ``ingest_20m``: ``bench.ingest`` (20 float32 columns into 2
  workers against pyarrow in one process) on 5M, 10M and 20M rows.

The data is generated once into ``$BENCH_CACHE_DIR`` (default
``/tmp/trainyard_bench_cache``; 20M rows are about 2.4 GB of Parquet per job) and
reused. Writes ``<out>/scaling.json`` (plus ``bench.run``'s ``latest.json`` of these
rows) and prints one table per job: the rows, ours, the anchor and the ratio at each
size. The goal (issue 22): ours does not fall further behind as rows grow, i.e. the
ratio at 20M is no worse than at the base size (for ``rows_per_s``, where higher is
better, no lower).

The scaled rows are registered here with ``in_default=False``: ``make bench`` skips them
(minutes each); ``bench.run --only xgboost_20m`` runs one alone. ``--quick`` uses
200k/400k GBDT rows and 1M/2M ingest rows, one repetition: a smoke run of the code.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from bench import ingest as _ingest
from bench import lightgbm as _lightgbm
from bench import xgboost as _xgboost
from bench.core import REPO, Workload, read_json, register, write_json

# The scaled sizes: (name suffix, full size, --quick size).
GBDT_SCALES = [("5m", 5_000_000, 200_000), ("20m", 20_000_000, 400_000)]
INGEST_SCALES = [("5m", 5_000_000, 1_000_000), ("20m", 20_000_000, 2_000_000)]
BASE_ROWS = {"xgboost": 500_000, "lightgbm": 500_000, "ingest": 10_000_000}
QUICK_BASE_ROWS = {"xgboost": 100_000, "lightgbm": 100_000, "ingest": 1_000_000}

# The metric each job's scaling is judged on, and whether higher is better.
JUDGED = {"xgboost": ("whole_wall_s", False), "lightgbm": ("whole_wall_s", False),
          "ingest": ("rows_per_s", True)}


def _rows(full: int, quick_rows: int):
    return lambda quick: quick_rows if quick else full


def _scaled_gbdt(base: Workload, module: str, suffix: str, full: int, quick_rows: int,
                 params: Dict[str, Any]) -> Workload:
    rows = _rows(full, quick_rows)
    return Workload(
        name=f"{base.name}_{suffix}",
        description=f"{base.name} on {full:,} training rows (quick: {quick_rows:,})",
        anchor=base.anchor,
        run_ours=lambda ctx: _xgboost.run_side(ctx, "ours", module, rows(ctx.quick)),
        run_anchor=lambda ctx: _xgboost.run_side(ctx, "single", module, rows(ctx.quick)),
        metrics=base.metrics, ray_mode="none",
        setup=lambda quick: _xgboost.data_paths(quick, rows(quick)),
        sizes=lambda quick: dict(_xgboost.sizes(quick, rows(quick)), params=params),
        rep_timeout_s=1800.0, notes=base.notes, in_default=False)


def _scaled_ingest(suffix: str, full: int, quick_rows: int) -> Workload:
    base = _ingest.WORKLOAD
    rows = _rows(full, quick_rows)
    return Workload(
        name=f"ingest_{suffix}",
        description=f"ingest on {full:,} rows (quick: {quick_rows:,})",
        anchor=base.anchor,
        run_ours=lambda ctx: _ingest.run_ours(ctx, _ingest.dataset_path(rows(ctx.quick))),
        run_anchor=lambda ctx: _ingest.run_anchor(ctx, _ingest.dataset_path(rows(ctx.quick))),
        metrics=base.metrics, ray_mode="warm",
        setup=lambda quick: _ingest.setup_rows(rows(quick)),
        sizes=lambda quick: _ingest.sizes_of(rows(quick)),
        rep_timeout_s=1800.0, notes=base.notes, in_default=False)


SCALED: List[Workload] = []
# Every row of a scaling table: workload name -> (job, rows, rows with --quick).
ROWS: Dict[str, Tuple[str, int, int]] = {
    job: (job, BASE_ROWS[job], QUICK_BASE_ROWS[job]) for job in JUDGED}
for _suffix, _full, _quick in GBDT_SCALES:
    for _base, _module, _params in ((_xgboost.WORKLOAD, "bench.xgboost", _xgboost.PARAMS),
                                    (_lightgbm.WORKLOAD, "bench.lightgbm",
                                     _lightgbm.PARAMS)):
        SCALED.append(register(_scaled_gbdt(_base, _module, _suffix, _full, _quick,
                                            _params)))
        ROWS[SCALED[-1].name] = (_base.name, _full, _quick)
for _suffix, _full, _quick in INGEST_SCALES:
    SCALED.append(register(_scaled_ingest(_suffix, _full, _quick)))
    ROWS[SCALED[-1].name] = ("ingest", _full, _quick)


def job_of(workload: str) -> str:
    return ROWS[workload][0] if workload in ROWS else workload


def scaling_table(latest: Dict[str, Any], quick: bool = False) -> Dict[str, Any]:
    """From ``bench.run``'s results: for each job and metric, the rows at each size with
    ours, the anchor and the ratio, smallest first, and whether the judged metric's
    ratio at the largest size is no worse than at the base size."""
    base_rows = QUICK_BASE_ROWS if quick else BASE_ROWS
    jobs: Dict[str, Any] = {}
    for row in latest["rows"]:
        if row["workload"] not in ROWS:
            continue
        job, full, quick_rows = ROWS[row["workload"]]
        jobs.setdefault(job, {}).setdefault(row["metric"], []).append({
            "workload": row["workload"], "rows": quick_rows if quick else full,
            "ours": row["ours"]["median"], "anchor": row["anchor"]["median"],
            "ratio": row["ratio"]})
    for job, metrics in jobs.items():
        for points in metrics.values():
            points.sort(key=lambda p: p["rows"])
        metric, higher_is_better = JUDGED[job]
        points = metrics.get(metric, [])
        base = next((p for p in points if p["rows"] == base_rows[job]), None)
        largest = points[-1] if points else None
        holds = None
        if base and largest and largest is not base and None not in (base["ratio"],
                                                                     largest["ratio"]):
            holds = (largest["ratio"] >= base["ratio"] if higher_is_better
                     else largest["ratio"] <= base["ratio"])
        metrics["judged"] = {"metric": metric, "higher_is_better": higher_is_better,
                             "base_rows": base_rows[job],
                             "largest_rows": largest["rows"] if largest else None,
                             "holds": holds}
    return jobs


def markdown(jobs: Dict[str, Any]) -> str:
    lines = ["| job | metric | rows | ours median | anchor median | ours/anchor |",
             "|---|---|---:|---:|---:|---:|"]
    for job, metrics in jobs.items():
        for metric, points in metrics.items():
            if metric == "judged":
                continue
            for p in points:
                lines.append(f"| {job} | {metric} | {p['rows']:,} | {_fmt(p['ours'])} | "
                             f"{_fmt(p['anchor'])} | {_fmt(p['ratio'])} |")
    verdicts = []
    for job, metrics in jobs.items():
        j = metrics["judged"]
        word = {True: "holds", False: "does NOT hold", None: "not measured"}[j["holds"]]
        better = "no lower" if j["higher_is_better"] else "no higher"
        verdicts.append(f"- {job}: {j['metric']} ratio at {j['largest_rows'] or 0:,} rows "
                        f"{better} than at {j['base_rows']:,}: {word}")
    return "\n".join(lines + [""] + verdicts)


def _fmt(v: Optional[float]) -> str:
    return "—" if v is None else f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def main(argv: Optional[List[str]] = None) -> int:
    from bench import run as bench_run

    p = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", nargs="+", choices=sorted(JUDGED), help="jobs to run")
    p.add_argument("--out", default=os.environ.get("BENCH_RESULTS_DIR",
                                                     str(Path(REPO) / "bench" / "results")))
    args = p.parse_args(argv)
    jobs = args.only or ["xgboost", "lightgbm", "ingest"]
    names: List[str] = []
    for job in jobs:
        scaled = [w.name for w in SCALED if job_of(w.name) == job]
        names += [job] + scaled
    run_out = Path(args.out) / "scaling_runs"
    rc = bench_run.main(["--only", *names, "--reps", str(args.reps), "--out", str(run_out)]
                        + (["--quick"] if args.quick else []))
    latest = read_json(run_out / "latest.json")
    jobs_table = scaling_table(latest, args.quick)
    table = markdown(jobs_table)
    write_json(Path(args.out) / "scaling.json", {
        "schema": 1, "finished": datetime.datetime.now().astimezone().isoformat(
            timespec="seconds"),
        "reps": args.reps, "quick": args.quick, "jobs": jobs_table,
        "table_markdown": table, "runs": str(run_out / "latest.json")})
    print("\n" + table)
    return rc


if __name__ == "__main__":
    sys.exit(main())
