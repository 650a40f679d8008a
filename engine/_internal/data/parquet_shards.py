"""Shards a worker reads itself: local Parquet files, split by row ranges, with pyarrow.

When a tree trainer's built-in loop reads a dataset given as local Parquet path(s) and
no preprocessor runs, streaming the rows through Ray Data (its read tasks, the
split coordinator, the object store) is pure overhead: each worker can read its own
rows from the files. :func:`plan_file_shards` gives each worker a
:class:`ParquetShard` — the files and a row range — and ``ParquetShard.read()`` reads
only the row groups that overlap it. The split keeps ``streaming_split(equal=True)``'s
contract: every worker gets ``rows // n`` rows, the last ``rows % n`` are dropped.

Only plain inputs take this path: local files (no URI), ``.parquet``/``.pq``/``.parq``
files or flat directories of them (no Hive partition folders, whose keys Ray Data would
add as columns), and no pandas index stored in the files. Anything else goes through
Ray Data as before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

_PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")


@dataclass(frozen=True)
class ParquetShard:
    """One worker's rows ``[start, stop)`` of the concatenation of ``files`` (in order)."""

    files: Tuple[str, ...]
    row_counts: Tuple[int, ...]
    start: int
    stop: int

    @property
    def num_rows(self) -> int:
        return self.stop - self.start

    def read(self) -> Any:
        """The shard's rows as one ``pyarrow.Table`` (only the row groups needed)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = []
        offset = 0
        for path, rows in zip(self.files, self.row_counts):
            lo, hi = max(self.start, offset), min(self.stop, offset + rows)
            if lo < hi:
                tables.append(_read_range(pq.ParquetFile(path), lo - offset, hi - offset))
            offset += rows
        if not tables:
            return pq.read_schema(self.files[0]).empty_table()
        table = pa.concat_tables(tables, promote_options="default")
        return table.replace_schema_metadata(None)


def _read_range(pf: Any, lo: int, hi: int) -> Any:
    """Rows ``[lo, hi)`` of one file, reading only the row groups that hold them."""
    groups, first, offset = [], None, 0
    for i in range(pf.metadata.num_row_groups):
        rows = pf.metadata.row_group(i).num_rows
        if offset < hi and offset + rows > lo:
            groups.append(i)
            first = offset if first is None else first
        offset += rows
    table = pf.read_row_groups(groups, use_pandas_metadata=False)
    return table.slice(lo - first, hi - lo)


def local_parquet_files(data: Any) -> Optional[List[str]]:
    """The Parquet files of a dataset given as local path(s), in Ray Data's order; None
    when the input is anything else (a Dataset, a DataFrame, a URI, CSV, a partitioned
    directory, files with a stored pandas index). Absolute: workers start in the
    run's directory, not the driver's."""
    if isinstance(data, (str, os.PathLike)):
        paths = [os.path.abspath(os.fspath(data))]
    elif (isinstance(data, (list, tuple)) and data
          and all(isinstance(p, (str, os.PathLike)) for p in data)):
        paths = [os.path.abspath(os.fspath(p)) for p in data]
    else:
        return None
    files: List[str] = []
    for path in paths:
        if "://" in path:
            return None
        if os.path.isfile(path):
            files.append(path)
        elif os.path.isdir(path):
            listed = _flat_directory(path)
            if listed is None:
                return None
            files.extend(listed)
        else:
            return None  # missing: Ray Data's error says so
    if not files or not all(f.lower().endswith(_PARQUET_SUFFIXES) for f in files):
        return None
    return files if _no_stored_index(files[0]) else None


def _flat_directory(path: str) -> Optional[List[str]]:
    """The data files of a directory with no sub-directories, sorted (names starting
    with ``.`` or ``_`` skipped, as Ray Data does); None for a nested one."""
    out = []
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.startswith((".", "_")):
                continue
            if entry.is_dir():
                return None
            out.append(entry.path)
    return sorted(out)


def _no_stored_index(path: str) -> bool:
    """Whether the file holds no pandas index columns (a stored RangeIndex is none)."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).pandas_metadata
    if not meta:
        return True
    return all(isinstance(c, dict) for c in meta.get("index_columns", []))


def plan_file_shards(files: Sequence[str], n: int, split: bool
                     ) -> Tuple[List[ParquetShard], int]:
    """One shard per worker (split: equal row ranges; else every row for each worker)
    and the files' total row count, from their footers (no data is read)."""
    import pyarrow.parquet as pq

    counts = tuple(pq.ParquetFile(f).metadata.num_rows for f in files)
    total = sum(counts)
    files = tuple(files)
    if not split or n <= 1:
        return [ParquetShard(files, counts, 0, total) for _ in range(n)], total
    per = total // n
    return [ParquetShard(files, counts, i * per, (i + 1) * per) for i in range(n)], total
