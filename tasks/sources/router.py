"""Which reader an ``ingest`` call needs: SQL, a Hive-partitioned directory, or the plain
file/built-in reader of ``tasks.sources.files`` (``None`` here: the caller goes on as before).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from engine.exceptions import ConfigError
from tasks.refs import DatasetRef

_SQL_SCHEMES = ("postgresql", "postgres", "sqlite", "mysql", "mariadb", "mssql", "oracle",
                "snowflake", "redshift", "bigquery", "duckdb", "trino", "cockroachdb")


def is_sql_url(source: Optional[str]) -> bool:
    """``postgresql://…``, ``sqlite:///…``, ``mysql+pymysql://…``: a SQLAlchemy URL."""
    if not isinstance(source, str) or "://" not in source:
        return False
    scheme = source.split("://", 1)[0].split("+", 1)[0].lower()
    return scheme in _SQL_SCHEMES


def ingest_from(source: Optional[str], format: Optional[str], *, storage: Optional[str],
                name: Optional[str], options: Dict[str, Any]) -> Optional[DatasetRef]:
    """The data set of a SQL or partitioned source, or None for the plain readers.

    Raises:
        ConfigError: options that do not fit the source (a window on a single file, SQL
            options on a path).
    """
    opts = {k: v for k, v in options.items() if v is not None and v is not False}
    sql_opts = {k for k in opts if k in ("sql", "connection", "key", "readers")}
    part_opts = {k for k in opts if k in ("partition_filter", "window", "since", "until",
                                          "incremental")}
    if "sql" in opts or is_sql_url(source):
        if part_opts:
            raise ConfigError(f"ingest: {sorted(part_opts)} apply to partitioned data sets, "
                              "not to SQL sources: put the condition in the query "
                              "(ingest(sql='SELECT … WHERE …', connection=…)).")
        from tasks.sources import sql

        return sql.ingest_sql(source, sql=options.get("sql"),
                               connection=options.get("connection"),
                               key=options.get("key"), readers=options.get("readers"),
                               storage=storage, name=name)
    if sql_opts:
        raise ConfigError(f"ingest: {sorted(sql_opts)} apply to SQL sources; {source!r} is "
                          "not a database URL (postgresql://…, sqlite:///…).")
    if not isinstance(source, str) or source.startswith("sklearn:") \
            or format not in (None, "parquet"):
        return _refuse(part_opts, source)
    from tasks.sources import partitions

    if "://" not in source and not source.startswith("/") and not source.startswith("~"):
        return _refuse(part_opts, source)
    if not partitions.is_partitioned(source):
        return _refuse(part_opts, source)
    return partitions.ingest_partitioned(
        source, storage=storage, name=name, partition_filter=options.get("partition_filter"),
        window=options.get("window"), since=options.get("since"), until=options.get("until"),
        incremental=bool(options.get("incremental")))


def _refuse(part_opts: set, source: Any) -> None:
    if part_opts:
        raise ConfigError(f"ingest: {sorted(part_opts)} need a Hive-partitioned Parquet "
                          f"directory (key=value subdirectories, e.g. "
                          f"events/date=2026-11-25/); {source!r} is not one.")
    return None
