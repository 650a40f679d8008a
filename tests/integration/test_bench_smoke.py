"""The benchmark harness still runs: one quick repetition of two workloads.

No timing is asserted here (numbers come from `make bench`); only that both sides ran
and the results file has the rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_bench_quick_smoke(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["BENCH_RESULTS_DIR"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--reps", "1",
         "--only", "empty_fit", "report_latency"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-4000:])
    data = json.loads((tmp_path / "latest.json").read_text())

    rows = {(r["workload"], r["metric"]): r for r in data["rows"]}
    assert ("empty_fit", "wall_s") in rows
    assert ("report_latency", "median_ms") in rows
    for row in rows.values():
        for side in ("ours", "anchor"):
            median = row[side]["median"]
            assert isinstance(median, (int, float)) and median >= 0, (row, side)
        assert isinstance(row["ratio"], (int, float))

    for name in ("empty_fit", "report_latency"):
        workload = data["workloads"][name]
        assert workload["errors"] == []
        for side in ("ours", "anchor"):
            res = workload["resources"][side]
            assert res["driver_peak_rss_mb"] > 0
            assert isinstance(res["actors_alive_after"], int)
            assert isinstance(res["placement_groups_alive_after"], int)
    assert "| empty_fit | wall_s" in data["table_markdown"]
