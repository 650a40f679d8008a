"""What a pipeline step pays in ``ray_job`` mode over ``local`` mode, on a warm cluster.

    python -m bench.ray_job_overhead [--address http://head:8265 --gcs head:6379]
                                     [--reps 2] [--train-s 30] [--out bench/results]

Without ``--address`` it starts its own cluster (``ray start --head --block`` in its own
process group, 4 CPUs, own ports; stopped at the end). Both modes run the same
``tasks.train`` of the digits pipeline (1 worker, ``epoch_delay_s`` paced so that
training takes about ``--train-s`` seconds) against that cluster, alternating, after
one warm-up of each (the ``local`` caller is then a warm Ray driver; each ``ray_job``
step starts a fresh job driver, which is the point):

* ``step_s`` — wall of the ``train`` call in the orchestrator's process;
* ``train_s`` — the run's own training time (``time_total_s`` of its last report);
* ``to_first_report_s`` — call start to the run's first report;
* ``end_to_ref_s`` — the run's last report to the reference returned (job end, result
  read back);
* ``extra_s`` — ``step_s`` of ``ray_job`` minus ``step_s`` of ``local``, per pair.

Target: ``extra_s`` <= 3 s for a step whose training takes 30 s. Writes
``<out>/ray_job_overhead.json`` and prints a Markdown table.

This is a standalone script, not a ``bench.run`` workload: it needs a cluster with a
job server, which the harness's warm local Ray is not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from bench.core import REPO, loadavg, write_json

TARGET_EXTRA_S = 3.0
EPOCH_S_GUESS = 0.6  # one digits epoch on one worker, before pacing


def _parse(argv: Any) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.ray_job_overhead", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", help="job server of a running cluster (http://head:8265)")
    p.add_argument("--gcs", help="its GCS address (head:6379), for the local-mode driver")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--train-s", type=float, default=30.0)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--out", default=os.environ.get("BENCH_RESULTS_DIR",
                                                     str(Path(REPO) / "bench" / "results")))
    return p.parse_args(argv)


def _first_report_at(run_uri: str) -> float:
    with open(os.path.join(run_uri, "result.json")) as f:
        return float(json.loads(f.readline())["timestamp"])


def _one_step(mode: str, splits: Any, storage: str, name: str, config: Dict[str, Any]
              ) -> Dict[str, Any]:
    import tasks

    os.environ["TRAINYARD_EXECUTION"] = mode
    t0 = time.time()
    ref = tasks.train("digits", splits, {"num_workers": 1},
                     {"name": name, "storage": storage, "config": config, "verbose": 0})
    t1 = time.time()
    with open(os.path.join(ref.run_uri, "run_state.json")) as f:
        record = json.load(f)
    last = record["history"][-1]
    row = {"mode": mode, "step_s": t1 - t0, "train_s": float(last["time_total_s"]),
           "to_first_report_s": _first_report_at(ref.run_uri) - t0,
           "end_to_ref_s": t1 - float(last["timestamp"]), "run": name,
           "loadavg": loadavg()}
    if mode == "ray_job":  # where the extra goes
        import glob

        result = glob.glob(os.path.join(storage, "jobs", f"*-{name}", "*-a*.json"))
        row.update(call_to_job_driver_s=record["owner"]["process_started_at"] - t0,
                   job_driver_to_run_start_s=record["owner"]["taken_at"]
                   - record["owner"]["process_started_at"],
                   result_written_to_ref_s=t1 - max(os.path.getmtime(p) for p in result))
    return row


def _cluster(args: argparse.Namespace) -> Any:
    if args.address:
        return None, args.address, args.gcs
    sys.path.insert(0, REPO)
    from tests.support.ray_job_cluster import RayHead

    venv_bin = os.path.dirname(sys.executable)
    head = RayHead(num_cpus=4, env={"PATH": os.pathsep.join([venv_bin,
                                                             os.environ.get("PATH", "")])})
    head.wait_ready()
    return head, head.address, head.gcs_address


def _table(rows: List[Dict[str, Any]], summary: Dict[str, Any]) -> str:
    lines = ["| mode | step (s) | training (s) | call → 1st report (s) | last report → ref (s) |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['step_s']:.2f} | {r['train_s']:.2f} | "
                     f"{r['to_first_report_s']:.2f} | {r['end_to_ref_s']:.2f} |")
    verdict = "met" if summary["extra_s_median"] <= TARGET_EXTRA_S else "MISSED"
    lines.append(f"\nextra wall of ray_job over local: median {summary['extra_s_median']:.2f} s "
                 f"(pairs {', '.join(f'{x:.2f}' for x in summary['extra_s'])}); target <= "
                 f"{TARGET_EXTRA_S:g} s for a {summary['train_s_median']:.0f} s step: {verdict}")
    return "\n".join(lines)


def main(argv: Any = None) -> int:
    args = _parse(argv)
    import tempfile

    head, address, gcs = _cluster(args)
    saved = {k: os.environ.get(k) for k in ("TRAINYARD_EXECUTION", "RAY_ADDRESS",
                                            "TRAINYARD_RAY_JOB_ADDRESS", "RAY_AUTH_MODE")}
    try:
        os.environ.update(TRAINYARD_RAY_JOB_ADDRESS=address, RAY_ADDRESS=gcs,
                          TRAINYARD_RAY_JOB_POLL_S="0.2")
        if head is not None:
            os.environ["RAY_AUTH_MODE"] = "disabled"
        import tasks

        storage = tempfile.mkdtemp(prefix="ty-bench-rayjob-")
        splits = tasks.split(tasks.ingest("sklearn:digits", storage=storage), 0.2, 0, "target")
        delay = max(0.0, args.train_s / args.epochs - EPOCH_S_GUESS)
        config = {"epochs": args.epochs, "epoch_delay_s": delay, "seed": 0}
        warm = {"epochs": 1, "seed": 0}
        for mode in ("local", "ray_job"):  # warm-up: imports, the driver's Ray, job agent
            _one_step(mode, splits, storage, f"warm-{mode}", warm)
        rows = []
        for rep in range(args.reps):
            for mode in ("local", "ray_job"):
                rows.append(_one_step(mode, splits, storage, f"{mode}-{rep}", config))
                print(json.dumps(rows[-1]), flush=True)
        pairs = [(rows[i], rows[i + 1]) for i in range(0, len(rows), 2)]
        extra = [j["step_s"] - loc["step_s"] for loc, j in pairs]
        summary = {"extra_s": extra, "extra_s_median": statistics.median(extra),
                   "train_s_median": statistics.median(r["train_s"] for r in rows),
                   "target_extra_s": TARGET_EXTRA_S, "address": address,
                   "own_cluster": head is not None, "cpus": os.cpu_count()}
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "ray_job_overhead.json", {"rows": rows, "summary": summary})
        print(_table(rows, summary))
        import shutil

        shutil.rmtree(storage, ignore_errors=True)
        return 0
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if head is not None:
            head.stop()


if __name__ == "__main__":
    sys.exit(main())
