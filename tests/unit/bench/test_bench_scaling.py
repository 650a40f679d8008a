"""The data-scaling benchmark (bench.scaling) without running one: which rows it adds,
that ``make bench`` leaves them out, the scaled data files, and the table and verdict it
prints from bench.run's results."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from bench import run as bench_run
from bench import scaling, xgboost
from bench.core import REGISTRY


def _row(workload, metric, ours, anchor):
    return {"workload": workload, "metric": metric, "ours": {"median": ours},
            "anchor": {"median": anchor}, "ratio": ours / anchor}


def test_scaled_rows_are_registered_and_left_out_of_the_default_run():
    names = {w.name for w in scaling.SCALED}
    assert names == {"xgboost_5m", "xgboost_20m", "lightgbm_5m", "lightgbm_20m",
                     "ingest_5m", "ingest_20m"}
    assert all(REGISTRY[n] is w for n, w in ((w.name, w) for w in scaling.SCALED))
    assert not any(w.in_default for w in scaling.SCALED)
    assert REGISTRY["xgboost"].in_default and REGISTRY["ingest"].in_default
    big = REGISTRY["xgboost_20m"].sizes(False)
    assert (big["train_rows"], big["valid_rows"], big["rounds"]) == (20_000_000,
                                                                     2_000_000, 50)


def test_bench_run_lists_the_scaled_rows_as_opt_in(capsys):
    assert bench_run.main(["--list"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("xgboost_20m "))
    assert "(only with --only)" in line
    assert "(only with --only)" not in next(ln for ln in out.splitlines()
                                            if ln.startswith("xgboost "))


def test_large_sets_are_written_in_chunks_with_the_split_at_the_train_size(
        tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(xgboost, "ONE_PIECE_ROWS", 1_000)
    monkeypatch.setattr(xgboost, "CHUNK_ROWS", 700)
    train, valid = xgboost.data_paths(False, train_rows=2_000)
    t, v = pq.read_table(train), pq.read_table(valid)
    assert (t.num_rows, v.num_rows) == (2_000, 200)
    assert t.schema.names == [f"f{i}" for i in range(28)] + ["label"]
    labels = t.column("label").to_numpy()
    assert 0.2 < labels.mean() < 0.8  # both classes, as in the one-piece data
    assert not list(tmp_path.glob("*.tmp"))
    # Generated once: a second call reuses the files.
    mtime = train.stat().st_mtime_ns
    assert xgboost.data_paths(False, train_rows=2_000)[0].stat().st_mtime_ns == mtime


def test_table_orders_sizes_and_judges_the_largest_against_the_base():
    latest = {"rows": [
        _row("xgboost_20m", "whole_wall_s", 200.0, 150.0),
        _row("xgboost", "whole_wall_s", 12.0, 4.0),
        _row("xgboost_5m", "whole_wall_s", 60.0, 40.0),
        _row("xgboost_ray_train", "whole_wall_s", 1.0, 2.0),   # not a scaling job
        _row("ingest", "rows_per_s", 5e6, 1e7),
        _row("ingest_20m", "rows_per_s", 4e6, 1e7),
    ]}
    jobs = scaling.scaling_table(latest)
    points = jobs["xgboost"]["whole_wall_s"]
    assert [p["rows"] for p in points] == [500_000, 5_000_000, 20_000_000]
    assert jobs["xgboost"]["judged"]["holds"] is True          # 1.33 ≤ 3.0
    assert jobs["ingest"]["judged"]["holds"] is False          # 0.4 < 0.5, higher is better
    assert "xgboost_ray_train" not in jobs
    text = scaling.markdown(jobs)
    assert "| xgboost | whole_wall_s | 20,000,000 | 200 | 150 | 1.33 |" in text
    assert "- ingest: rows_per_s ratio at 20,000,000 rows no lower than at 10,000,000: " \
           "does NOT hold" in text


def test_a_job_without_its_largest_size_is_not_judged():
    jobs = scaling.scaling_table({"rows": [_row("lightgbm", "whole_wall_s", 9.0, 4.0)]})
    assert jobs["lightgbm"]["judged"]["holds"] is None
    assert "not measured" in scaling.markdown(jobs)


@pytest.mark.parametrize("name,job", [("xgboost_5m", "xgboost"), ("ingest", "ingest"),
                                      ("xgboost_ray_train", "xgboost_ray_train")])
def test_job_of(name, job):
    assert scaling.job_of(name) == job
