"""The data steps: ``ingest`` a source as Parquet, ``split`` it into train and validation.

Both are idempotent for a retry: the same content ingested or split again returns the
committed copy.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Union

from engine.exceptions import ConfigError
from engine.storage import Storage, default_root, join
from tasks import layout
from tasks.refs import DatasetRef
from tasks.sources import files, router

logger = logging.getLogger("tasks")

DatasetLike = Union[DatasetRef, Dict[str, Any]]


def ingest(source: Optional[str] = None, format: Optional[str] = None, *,
           storage: Optional[str] = None, name: Optional[str] = None,
           partition_filter: Optional[Dict[str, Any]] = None,
           window: Optional[Dict[str, Any]] = None, since: Any = None, until: Any = None,
           incremental: bool = False, sql: Optional[str] = None,
           connection: Optional[str] = None, key: Optional[str] = None,
           readers: Optional[int] = None) -> DatasetRef:
    """Materialise a source as Parquet under ``<storage>/datasets/``.

    Args:
        source: A built-in data set (``sklearn:digits``, ``digits``, ``breast_cancer``,
            ``wine``, ``diabetes``, ``iris``); an absolute path / URI (``s3://``) of a
            Parquet, CSV or newline-delimited JSON file or directory, or of a
            Hive-partitioned Parquet directory (``events/date=2026-11-25/…``); or a
            SQLAlchemy database URL with a table, ``postgresql://user@host/db?table=t``.
        format: ``parquet``, ``csv`` or ``json``; default: from the file suffix.
        storage: Pipeline storage root; default ``$TRAINYARD_STORAGE_PATH`` or
            ``~/trainyard_results``.
        name: Data set name (default: the built-in's, the file's or the table's name).
        partition_filter: Partitioned sources: ``{key: value or [values]}``.
        window: Partitioned sources: ``{"column": "date", "last": "30d"}`` (or
            ``"since"``/``"until"``): the partitions with ``since <= value < until``.
        since, until: The window's bounds (dates, datetimes or ISO strings); ``until``
            defaults to now; the shipped flow and DAG pass their logical date.
        incremental: Partitioned sources: read only partitions whose files changed since
            they were last ingested; nothing changed: the previous data set, unread.
        sql: A query to ingest (with ``connection``).
        connection: The database URL for ``sql`` (credentials: see ``tasks.sources.sql``).
        key: SQL: the integer column to shard the parallel read by and to order rows by
            (default: the table's primary key; none: ``LIMIT/OFFSET`` shards).
        readers: SQL: parallel reads (Ray tasks); default 2.

    Returns:
        A :class:`DatasetRef` with row count, schema and content fingerprint. The same
        content ingested again returns the committed copy.
    """
    routed = router.ingest_from(source, format, storage=storage, name=name, options=dict(
        partition_filter=partition_filter, window=window, since=since, until=until,
        incremental=incremental, sql=sql, connection=connection, key=key, readers=readers))
    if routed is not None:
        return routed
    src = files.open_source(source, format)
    name = layout.clean_name(name or src.name, "data set name")
    st = Storage.from_path(layout.sub(default_root(storage), layout.DATASETS_DIR))
    parent = st.root
    staging = files.staging_dir(st, parent)
    sink = files.ParquetSink(st, staging, src.schema)
    try:
        for batch in src.batches():
            sink.write(batch)
        num_rows, fp = sink.close()
    except BaseException:
        st.delete_dir(staging)
        raise
    final = join(parent, f"{name}-{fp[:12]}")
    ref = DatasetRef(uri=st.display(final), format="parquet", num_rows=num_rows,
                     schema=files.schema_dict(src.schema), fingerprint=fp, name=name,
                     metadata=dict(src.metadata))
    ref = files.commit(st, staging, final, ref)
    logger.info("Ingested %s: %d rows → %s", src.metadata.get("source"), num_rows, ref.uri)
    return ref


def split(dataset: DatasetLike, test_size: float = 0.2, seed: int = 0,
          stratify_column: Optional[str] = None) -> Dict[str, DatasetRef]:
    """Split a data set into ``train`` and ``validation``, deterministically for a seed.

    Args:
        dataset: What :func:`ingest` returned.
        test_size: Fraction of rows in ``validation`` (0 < test_size < 1).
        seed: The same seed gives the same split.
        stratify_column: Keep this column's class proportions in both parts.

    Returns:
        ``{"train": DatasetRef, "validation": DatasetRef}``, written next to the input.
    """
    ref = DatasetRef.from_dict(dataset)
    if isinstance(test_size, bool) or not isinstance(test_size, (int, float)) \
            or not 0 < test_size < 1:
        raise ConfigError(f"split(test_size={test_size!r}): use a fraction between 0 and 1, "
                          "e.g. 0.2.")
    if stratify_column is not None and stratify_column not in ref.schema:
        raise ConfigError(f"split(stratify_column={stratify_column!r}): the data set has no "
                          f"such column (it has {ref.columns}). If that is a pipeline's "
                          "label column, the data does not fit the pipeline: give it a "
                          "source with that column, or fix the PipelineSpec's label_column.")
    st = Storage.from_path(ref.uri)
    inner = st.root
    tag = f"-by-{layout.clean_name(stratify_column)}" if stratify_column else ""
    out_dir = f"{inner.rstrip('/')}-split-s{int(seed)}-t{test_size:g}{tag}"
    outputs = {k: join(out_dir, k) for k in ("train", "validation")}
    done = {k: files.load_manifest(st, p) for k, p in outputs.items()}
    if all(d is not None and d.metadata.get("parent") == ref.fingerprint
           for d in done.values()):
        return done  # type: ignore[return-value]
    for key, found in done.items():
        if found is not None and found.metadata.get("parent") != ref.fingerprint:
            st.delete_dir(outputs[key])  # split from other content under the same name
    mask = files.split_mask(ref, test_size, int(seed), stratify_column)
    params = dict(seed=int(seed), test_size=test_size, stratify_column=stratify_column)
    return files.write_split(st, ref, mask, outputs, params)


__all__ = ["ingest", "split", "DatasetLike"]
