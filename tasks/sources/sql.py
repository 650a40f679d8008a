"""SQL sources: any SQLAlchemy URL, read in parallel with Ray Data's SQL reader into the
same committed Parquet data set as a file source.

    ingest("postgresql://analyst@db.internal/shop?table=events")
    ingest(sql="SELECT * FROM events WHERE day >= '2026-11-01'", connection=url, key="id")

**Sharding and order.** The rows are read by ``readers`` Ray tasks
(``ray.data.read_sql``, one query each) and written in a fixed order, so that the same
rows give the same fingerprint however many readers read them: with a ``key`` (an
integer column; for a table, its primary key by default) each reader takes a range of
key values, ``ORDER BY key``; without one, each takes a ``LIMIT/OFFSET`` slice of the
rows ordered by every column. (Ray's own ``shard_keys`` hash the key into shards, which
gives neither a row order nor an index range scan, and needs ``MD5`` to return a number,
which PostgreSQL's does not.)

**Credentials** come from the URL (``user:password@``), from ``$TRAINYARD_SQL_PASSWORD``
(filled into a URL without a password), from ``connection="env:VAR"`` (the whole URL in
an environment variable), or from the driver's own environment (``PGPASSWORD``); the
orchestrator adapters take an Airflow ``conn_id`` or a Prefect ``Secret`` block. The
password reaches only the database driver: references, manifests, errors and log lines
show the URL without it and without its query string.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pyarrow as pa

from engine import constants
from engine.exceptions import ConfigError, TrainyardError
from engine.storage import Storage, default_root
from tasks import layout
from tasks.sources import files
from tasks.refs import DatasetRef

logger = logging.getLogger("tasks")

PASSWORD_ENV_VAR = constants.SQL_PASSWORD_ENV_VAR
DEFAULT_READERS = 2
_OWN_PARAMS = ("table", "key", "readers")  # URL query parameters that are trainyard's
_PG_DRIVERS = ("psycopg", "psycopg2", "pg8000")
_ALIAS = "trainyard_src"


class SourceError(TrainyardError):
    """A read from a database failed after its probe succeeded (a reader lost the
    connection): worth a retry, unlike a ConfigError."""


class _Connect:
    """A picklable DB-API connection factory for Ray's read tasks: it carries the URL
    (with the password) to the reader processes, and shows it without the password."""

    def __init__(self, url: Any) -> None:
        self._url = url.render_as_string(hide_password=False)
        self._shown = shown_url(url)

    def __call__(self) -> Any:
        import sqlalchemy
        from sqlalchemy.pool import NullPool

        return sqlalchemy.create_engine(self._url, poolclass=NullPool).raw_connection()

    def __repr__(self) -> str:
        return f"<connection to {self._shown}>"


# --- URLs -------------------------------------------------------------------------------
def parse_source(source: Optional[str], sql: Optional[str], connection: Optional[str],
                 key: Optional[str], readers: Optional[int]
                 ) -> Tuple[Any, Optional[str], str, Optional[str], int]:
    """``(SQLAlchemy URL, table or None, query, key, readers)`` of an ingest call.

    Raises:
        ConfigError: neither a table nor a query, both, a malformed URL.
    """
    raw = _resolve_env(connection if sql is not None else source)
    if sql is not None and source is not None and connection is not None:
        raise ConfigError("ingest(sql=...) takes the database as connection=...; do not "
                          "also pass a source.")
    if not raw:
        raise ConfigError("ingest(sql=...) needs connection='postgresql://user@host/db' "
                          "(or 'env:VAR' naming an environment variable that holds it).")
    url = _url(raw)
    params = dict(url.query)
    table = params.get("table")
    key = key or params.get("key")
    readers = int(readers or params.get("readers") or DEFAULT_READERS)
    url = url.difference_update_query(_OWN_PARAMS)
    if sql is None and not table:
        raise ConfigError(f"ingest({shown_url(url)!r}): name the table "
                          "(…?table=events) or pass sql='SELECT …' with connection=.")
    if sql is not None and table:
        raise ConfigError("ingest: give a table (?table=) or a query (sql=), not both.")
    if readers < 1:
        raise ConfigError(f"ingest(readers={readers}): use 1 or more.")
    return _with_driver(_with_password(url)), table, sql or "", key, readers


def with_table(url: str, table: str) -> str:
    """``url`` with ``?table=`` set (for adapters that hold a URL from a secret store and
    a table name from the user); the password stays in, for the driver only."""
    parsed = _url(url).update_query_dict({"table": table})
    return parsed.render_as_string(hide_password=False)


def _resolve_env(text: Optional[str]) -> Optional[str]:
    if isinstance(text, str) and text.startswith("env:"):
        name = text[4:]
        value = os.environ.get(name)
        if not value:
            raise ConfigError(f"connection {text!r}: the environment variable {name} is not "
                              "set; put the database URL there.")
        return value
    return text


def _url(raw: str) -> Any:
    try:
        import sqlalchemy
    except ImportError as exc:
        raise ImportError("SQL sources need SQLAlchemy and a driver: pip install "
                          "'trainyard[sql]'.") from exc
    if raw.startswith("postgres://"):  # Airflow's and Heroku's spelling
        raw = "postgresql://" + raw[len("postgres://"):]
    try:
        url = sqlalchemy.engine.make_url(raw)
    except Exception:
        raise ConfigError("The database URL is malformed: use dialect[+driver]://user@host"
                          "[:port]/database (e.g. postgresql://analyst@db/shop).") from None
    extra = [k for k in url.query if k.startswith("__extra__")]  # Airflow's conn extras
    return url.difference_update_query(extra) if extra else url


def _with_password(url: Any) -> Any:
    password = constants.get(PASSWORD_ENV_VAR)
    if url.password is None and password and url.drivername.split("+")[0] != "sqlite":
        return url.set(password=password)
    return url


def _with_driver(url: Any) -> Any:
    """``postgresql://`` with the first installed driver (SQLAlchemy's default,
    psycopg2, is often not the one installed)."""
    if url.drivername != "postgresql":
        return url
    import importlib.util

    for driver in _PG_DRIVERS:
        if importlib.util.find_spec(driver) is not None:
            return url.set(drivername=f"postgresql+{driver}")
    raise ImportError("PostgreSQL needs a driver: pip install 'trainyard[sql]' "
                      "(psycopg).")


def shown_url(url: Any) -> str:
    """The URL as references and logs show it: no password, no query string."""
    # URL.set() ignores None (it means "unchanged"): replace the fields themselves.
    return url._replace(password=None, query={}).render_as_string(hide_password=True)


def _scrub(text: str, url: Any) -> str:
    from urllib.parse import quote

    for secret in {url.password, quote(str(url.password or ""), safe="")} - {None, ""}:
        text = text.replace(str(secret), "***")
    return text


# --- probing ----------------------------------------------------------------------------
def _db_error(exc: Exception, url: Any, what: str) -> ConfigError:
    """A clear error for a failed connect or query (never with the password)."""
    import sqlalchemy.exc as sa_exc

    reason = _scrub(str(getattr(exc, "orig", None) or exc).strip().splitlines()[0], url)
    shown = shown_url(url)
    if isinstance(exc, sa_exc.OperationalError) and what == "connect":
        return ConfigError(f"Cannot connect to {shown}: {reason}. Check the host, port and "
                           f"database, and the credentials ({PASSWORD_ENV_VAR}, the URL, an "
                           "Airflow conn_id or a Prefect block).")
    return ConfigError(f"The query on {shown} failed: {reason}.")


def _table_query(db: Any, url: Any, table: str) -> Tuple[str, Optional[str]]:
    """``SELECT * FROM <table>`` (quoted) and its integer primary key, if it has one.

    Raises:
        ConfigError: the table does not exist (the message lists those that do).
    """
    import sqlalchemy

    schema, _, name = table.rpartition(".")
    inspector = sqlalchemy.inspect(db)
    if not inspector.has_table(name, schema=schema or None):
        tables = inspector.get_table_names(schema=schema or None)
        raise ConfigError(f"Table {table!r} does not exist in {shown_url(url)} (tables: "
                          f"{tables[:20]}{' …' if len(tables) > 20 else ''}).")
    quote = db.dialect.identifier_preparer.quote
    query = f"SELECT * FROM {quote(schema) + '.' if schema else ''}{quote(name)}"
    pk = inspector.get_pk_constraint(name, schema=schema or None).get("constrained_columns")
    if pk and len(pk) == 1:
        col = next(c for c in inspector.get_columns(name, schema=schema or None)
                   if c["name"] == pk[0])
        if isinstance(col["type"], sqlalchemy.Integer):
            return query, pk[0]
    return query, None


def _sample(conn: Any, query: str, rows: int = 1000) -> pa.Table:
    """The first ``rows`` rows, converted as Ray's SQL reader converts them. The query
    runs as written (streamed, so nothing more is fetched), so that an error in it
    points at the user's own text."""
    import sqlalchemy

    result = conn.execution_options(stream_results=True).execute(sqlalchemy.text(query))
    try:
        names = list(result.keys())
        data = result.fetchmany(rows)
    finally:
        result.close()
    return pa.Table.from_pydict({n: [r[i] for r in data] for i, n in enumerate(names)})


def _schema(conn: Any, query: str) -> pa.Schema:
    """The Arrow schema of the query's rows: from a sample, and for a column the sample
    has only NULLs in, from its first non-NULL value anywhere."""
    import sqlalchemy

    sample = _sample(conn, query)
    quote = conn.dialect.identifier_preparer.quote
    fields = []
    for field in sample.schema:
        if pa.types.is_null(field.type):
            col = quote(field.name)
            found = conn.execute(sqlalchemy.text(
                f"SELECT {col} FROM ({query}) AS {_ALIAS} WHERE {col} IS NOT NULL "
                "LIMIT 1")).fetchall()
            if found:
                field = pa.field(field.name, pa.array([found[0][0]]).type)
        fields.append(field)
    return pa.schema(fields)


def _shards(conn: Any, query: str, key: Optional[str], columns: List[str],
            readers: int) -> Tuple[List[str], int]:
    """One query per reader and the total row count (module docstring)."""
    import sqlalchemy

    if key is not None:
        if key not in columns:
            raise ConfigError(f"key {key!r} is not a column of the result ({columns}).")
        col = conn.dialect.identifier_preparer.quote(key)
        lo, hi, count, keyed = conn.execute(sqlalchemy.text(
            f"SELECT MIN({col}), MAX({col}), COUNT(*), COUNT({col}) FROM ({query}) AS "
            f"{_ALIAS}")).one()
        if count and keyed != count:
            raise ConfigError(f"key {key!r} is NULL in {count - keyed} rows: shard by a "
                              "column without NULLs, or pass no key.")
        if count and not (isinstance(lo, int) and isinstance(hi, int)):
            raise ConfigError(f"key {key!r} is not an integer column: pass an integer key, "
                              "or none (the rows are then sliced with LIMIT/OFFSET).")
        bounds = [lo + ((hi - lo + 1) * i) // readers for i in range(readers + 1)] \
            if count else [0, 1]
        return [f"SELECT * FROM ({query}) AS {_ALIAS} WHERE {col} >= {a} AND {col} < {b} "
                f"ORDER BY {col}" for a, b in zip(bounds, bounds[1:]) if b > a], count
    count = conn.execute(sqlalchemy.text(
        f"SELECT COUNT(*) FROM ({query}) AS {_ALIAS}")).scalar_one()
    order = ", ".join(str(i + 1) for i in range(len(columns)))
    size = -(-count // readers) if count else 1
    return [f"SELECT * FROM ({query}) AS {_ALIAS} ORDER BY {order} LIMIT {size} OFFSET {o}"
            for o in range(0, max(count, 1), size)], count


# --- ingest -----------------------------------------------------------------------------
def ingest_sql(source: Optional[str], *, sql: Optional[str], connection: Optional[str],
               key: Optional[str], readers: Optional[int], storage: Optional[str],
               name: Optional[str]) -> DatasetRef:
    """``tasks.ingest`` of a table or query (module docstring).

    Raises:
        ConfigError: the database cannot be reached, the table does not exist, the query
            fails or returns no rows — before anything is written.
    """
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    url, table, query, key, readers = parse_source(source, sql, connection, key, readers)
    db = sqlalchemy.create_engine(url, poolclass=NullPool)
    try:
        with db.connect():
            pass
    except Exception as exc:
        raise _db_error(exc, url, "connect") from None
    try:
        if table:
            query, table_key = _table_query(db, url, table)
            key = key or table_key
        with db.connect() as conn:
            schema = _schema(conn, query)
            shards, count = _shards(conn, query, key, schema.names, readers)
    except ConfigError:
        raise
    except Exception as exc:
        raise _db_error(exc, url, "query") from None
    finally:
        db.dispose()
    if count == 0:
        raise ConfigError(f"The query on {shown_url(url)} returned no rows: nothing to "
                          "ingest.")
    metadata = {"source": shown_url(url), "source_format": "sql", "table": table,
                "query_sha256": None if table else hashlib.sha256(query.encode()).hexdigest(),
                "key": key}
    name = layout.clean_name(name or table or "query", "data set name")
    return _write(_Connect(url), shards, schema, name, storage, metadata, url)


def _write(factory: _Connect, shards: List[str], schema: pa.Schema, name: str,
           storage: Optional[str], metadata: Dict[str, Any], url: Any) -> DatasetRef:
    """Read the shards with Ray Data, in order, into a committed Parquet data set."""
    st = Storage.from_path(layout.sub(default_root(storage), layout.DATASETS_DIR))
    parent = st.root
    staging = files.staging_dir(st, parent)
    sink = files.ParquetSink(st, staging, schema)
    try:
        for batch in _read(factory, shards, schema, url):
            sink.write(batch)
        num_rows, fp = sink.close()
        final = f"{parent.rstrip('/')}/{name}-{fp[:12]}"
        ref = DatasetRef(uri=st.display(final), format="parquet", num_rows=num_rows,
                         schema=files.schema_dict(schema), fingerprint=fp, name=name,
                         metadata=metadata)
        ref = files.commit(st, staging, final, ref)
    except BaseException:
        st.delete_dir(staging)
        raise
    logger.info("Ingested %s (%d readers): %d rows → %s", metadata["source"], len(shards),
                num_rows, ref.uri)
    return ref


def _read(factory: _Connect, shards: List[str], schema: pa.Schema,
          url: Any) -> Iterator[pa.RecordBatch]:
    """The shards' rows in shard order, cast to ``schema``: one ``ray.data.read_sql``
    per shard (each one read task), run in parallel as one union."""
    import ray.data

    from engine.runtime import ensure_ray

    ensure_ray()
    # A Dataset copies the current DataContext when it is made: set it first. Rows come
    # back in shard order (the fingerprint depends on it); no progress output in logs.
    ctx = ray.data.DataContext.get_current()
    old = ctx.execution_options.preserve_order, ctx.enable_progress_bars
    ctx.execution_options.preserve_order, ctx.enable_progress_bars = True, False
    # Ray's reader logs that it "falls back" to one task per query: each of our queries
    # is one shard already.
    quiet = logging.getLogger("ray.data._internal.datasource.sql_datasource")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        datasets = [ray.data.read_sql(q, factory, override_num_blocks=1) for q in shards]
        ds = datasets[0].union(*datasets[1:]) if len(datasets) > 1 else datasets[0]
        for table in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            for batch in _cast(table, schema).to_batches(files.BATCH_ROWS):
                yield batch
    except Exception as exc:
        raise SourceError(f"Reading {shown_url(url)} failed in a reader: "
                          f"{_scrub(str(exc).strip().splitlines()[-1], url)}") from None
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars = old
        quiet.setLevel(level)


def _cast(table: pa.Table, schema: pa.Schema) -> pa.Table:
    arrays = []
    for field in schema:
        col = table.column(field.name)
        arrays.append(pa.nulls(len(col), field.type) if pa.types.is_null(col.type)
                      else col.cast(field.type))
    return pa.Table.from_arrays(arrays, schema=schema)
