"""Reading sources, writing Parquet data sets, content fingerprints.

A data set directory is committed as checkpoints are, by ``Storage.commit_dir``: its
commit marker (``constants.COMMIT_MARKER``) holds the DatasetRef as JSON, and a
directory without one (a write cut short) is never used. Readers (pyarrow, Ray Data)
skip names starting with ``_`` or ``.``.
Data is streamed batch by batch: nothing is loaded whole except a split's row mask (one
byte per row) and, for a stratified split, the stratify column.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np
import pyarrow as pa

from engine.exceptions import ConfigError
from engine.storage import Storage, is_uri, join, redact, resolve
from tasks.refs import DatasetRef

logger = logging.getLogger("tasks")

# Data sets written before they committed through Storage.commit_dir carry their
# reference here instead of in the commit marker; they are read as they are.
LEGACY_MANIFEST = "_dataset.json"
ROWS_PER_FILE = 1_000_000
BATCH_ROWS = 65_536
# scikit-learn's bundled data sets (no download): name -> loader in sklearn.datasets.
BUILTIN_SOURCES = {
    "digits": "load_digits", "breast_cancer": "load_breast_cancer", "wine": "load_wine",
    "diabetes": "load_diabetes", "iris": "load_iris",
}
_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".parq": "parquet", ".csv": "csv",
            ".tsv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json"}


@dataclass
class Source:
    """An opened input: its schema, a batch iterator factory and provenance."""

    schema: pa.Schema
    batches: Callable[[], Iterator[pa.RecordBatch]]
    name: str
    metadata: Dict[str, Any]


# --- sources ----------------------------------------------------------------------------
def open_source(source: str, format: Optional[str] = None) -> Source:
    """A built-in (``sklearn:digits`` or ``digits``), or a local/URI file or directory of
    Parquet, CSV or newline-delimited JSON."""
    if not isinstance(source, str) or not source:
        raise ConfigError(f"ingest(source={source!r}): give a path, a URI (s3://...) or a "
                          f"built-in data set ({', '.join(sorted(BUILTIN_SOURCES))}).")
    builtin = source.split(":", 1)[1] if source.startswith("sklearn:") else source
    if builtin in BUILTIN_SOURCES:
        return _builtin(builtin)
    if source.startswith("sklearn:"):
        raise ConfigError(f"Unknown built-in data set {source!r}: use one of "
                          f"{['sklearn:' + n for n in sorted(BUILTIN_SOURCES)]}.")
    if not is_uri(source) and not os.path.isabs(os.path.expanduser(source)):
        raise ConfigError(
            f"ingest(source={source!r}) is neither a built-in data set "
            f"({', '.join(sorted(BUILTIN_SOURCES))}) nor an absolute path or URI: pass "
            f"{os.path.abspath(source)!r} or s3://bucket/key.")
    return _files(source, format)


def _builtin(name: str) -> Source:
    try:
        import sklearn.datasets as skd
    except ImportError as exc:
        raise ImportError("Built-in data sets come from scikit-learn: pip install "
                          "'trainyard[sklearn]'.") from exc
    frame = getattr(skd, BUILTIN_SOURCES[name])(as_frame=True).frame
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata(None)
    return Source(table.schema, lambda: iter(table.to_batches(BATCH_ROWS)), name,
                  {"source": f"sklearn:{name}"})


def _files(source: str, format: Optional[str]) -> Source:
    import pyarrow.dataset as pds

    shown = redact(source)
    fs, inner = resolve(source if is_uri(source)
                        else os.path.abspath(os.path.expanduser(source)))
    paths = data_files(fs, inner)
    if not paths:
        raise ConfigError(f"ingest: {shown!r} does not exist or holds no data files.")
    fmt = format or _FORMATS.get(os.path.splitext(paths[0].lower())[1])
    if fmt not in ("parquet", "csv", "json"):
        raise ConfigError(f"ingest: cannot tell the format of {shown!r}: pass "
                          "format='parquet', 'csv' or 'json'.")
    file_format: Any = fmt
    if fmt == "csv" and paths[0].lower().endswith(".tsv"):
        import pyarrow.csv as pcsv

        file_format = pds.CsvFileFormat(parse_options=pcsv.ParseOptions(delimiter="\t"))
    try:
        dataset = pds.dataset(paths, filesystem=fs, format=file_format)
        schema = dataset.schema.remove_metadata()
    except (pa.ArrowInvalid, OSError) as exc:
        raise ConfigError(f"ingest: cannot read {shown!r} as {fmt} ({exc}).") from None
    base = inner.rstrip("/").rsplit("/", 1)[-1]
    name = base.split(".", 1)[0] if "." in base else base
    return Source(schema, lambda: _cast(dataset.to_batches(batch_size=BATCH_ROWS), schema),
                  name or "data", {"source": shown, "source_format": fmt})


def _cast(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield batch.replace_schema_metadata(None) if batch.schema.metadata else batch


def data_files(fs: Any, inner: str) -> List[str]:
    """The data files of a file or a directory (recursive; names starting with ``.`` or
    ``_`` skipped, as Ray Data and pyarrow do), sorted."""
    import pyarrow.fs as pafs

    info = fs.get_file_info(inner)
    if info.type == pafs.FileType.File:
        return [inner]
    if info.type != pafs.FileType.Directory:
        return []
    infos = fs.get_file_info(pafs.FileSelector(inner, recursive=True))
    prefix = inner.rstrip("/") + "/"
    return sorted(i.path for i in infos if i.type == pafs.FileType.File
                  and not any(p.startswith((".", "_"))
                              for p in i.path[len(prefix):].split("/")))


def scan(ref: DatasetRef, columns: Optional[List[str]] = None) -> Iterator[pa.RecordBatch]:
    """The batches of a data set, in file order."""
    import pyarrow.dataset as pds

    fs, inner = resolve(ref.uri)
    paths = data_files(fs, inner)
    if not paths:
        raise ConfigError(f"Data set {ref.uri!r} holds no data files (was it deleted?).")
    return pds.dataset(paths, filesystem=fs, format=ref.format).to_batches(
        columns=columns, batch_size=BATCH_ROWS)


def read_pandas(ref: DatasetRef) -> Any:
    """The whole data set as a pandas DataFrame (small data sets only)."""
    batches = list(scan(ref))
    table = pa.Table.from_batches(batches) if batches else pa.table(
        {c: pa.array([]) for c in ref.schema})
    return table.to_pandas()


# --- fingerprints -----------------------------------------------------------------------
class Fingerprint:
    """SHA-256 over the schema and one 64-bit hash per row (pandas'), in row order: the
    same rows give the same digest whatever the batch boundaries or storage."""

    def __init__(self, schema: pa.Schema) -> None:
        self._h = hashlib.sha256(json.dumps(
            [[f.name, str(f.type)] for f in schema]).encode())
        self.num_rows = 0

    def update(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        import pandas as pd

        try:
            hashed = pd.util.hash_pandas_object(batch.to_pandas(), index=False)
        except (TypeError, NotImplementedError, ValueError):
            # Array, list or tensor cells: hash their bytes.
            df = pd.DataFrame({name: col.to_pandas() if _flat(col.type) else
                               pd.Series([_cell_bytes(v) for v in col.to_pylist()],
                                         dtype=object)
                               for name, col in zip(batch.schema.names, batch.columns)})
            hashed = pd.util.hash_pandas_object(df, index=False)
        self._h.update(np.ascontiguousarray(hashed.to_numpy(dtype=np.uint64)).tobytes())
        self.num_rows += batch.num_rows

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _flat(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or isinstance(t, pa.ExtensionType))


def _cell_bytes(value: Any) -> Any:
    if value is None or isinstance(value, (str, bytes, int, float, bool)):
        return value
    return np.asarray(value).tobytes()


# --- writing ----------------------------------------------------------------------------
class ParquetSink:
    """Writes batches as ``part-00000.parquet``… (``ROWS_PER_FILE`` rows each) under a
    directory, fingerprinting them on the way."""

    def __init__(self, st: Storage, directory: str, schema: pa.Schema) -> None:
        self.st, self.directory, self.schema = st, directory, schema
        self.fingerprint = Fingerprint(schema)
        self._writer: Any = None
        self._stream: Any = None
        self._rows_in_file = 0
        self._files = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self.fingerprint.update(batch)
        while batch.num_rows:
            if self._writer is None or self._rows_in_file >= ROWS_PER_FILE:
                self._open()
            take = min(batch.num_rows, ROWS_PER_FILE - self._rows_in_file)
            self._writer.write_batch(batch.slice(0, take))
            self._rows_in_file += take
            batch = batch.slice(take)

    def _open(self) -> None:
        import pyarrow.parquet as pq

        self._close_file()
        self.st.makedirs(self.directory)
        path = join(self.directory, f"part-{self._files:05d}.parquet")
        self._stream = self.st.fs.open_output_stream(path)
        self._writer = pq.ParquetWriter(self._stream, self.schema)
        self._files += 1
        self._rows_in_file = 0

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._stream.close()
            self._writer = self._stream = None

    def close(self) -> Tuple[int, str]:
        """Finish the files (an empty data set gets one empty file, so that readers see
        its schema); return ``(num_rows, fingerprint)``."""
        if self._files == 0:
            self._open()
        self._close_file()
        return self.fingerprint.num_rows, self.fingerprint.hexdigest()


def schema_dict(schema: pa.Schema) -> Dict[str, str]:
    return {f.name: str(f.type) for f in schema}


def staging_dir(st: Storage, parent: str) -> str:
    return join(parent, f".staging-{uuid.uuid4().hex[:12]}")


def load_manifest(st: Storage, directory: str) -> Optional[DatasetRef]:
    """The reference of the data set committed at ``directory``, or None if there is
    none (nothing there, or a write cut short)."""
    marker = st.read_commit_marker(directory)
    data = marker.get("dataset") if marker is not None else None
    if data is None:
        # Written by trainyard before data sets used the common commit: the manifest
        # was their commit (in place before the rename, or written last on S3).
        data = st.read_json(join(directory, LEGACY_MANIFEST))
    if data is None:
        return None
    ref = DatasetRef.from_dict(data)
    ref.uri = st.display(directory)  # where it is now (the data set may have moved)
    return ref


def commit(st: Storage, staging: str, final: str, ref: DatasetRef) -> DatasetRef:
    """Make ``staging`` the data set at ``final`` (``Storage.commit_dir``, its reference
    in the commit marker); if a committed copy is there already (the same content: the
    name holds the fingerprint), keep that one and drop ``staging``."""
    existing = load_manifest(st, final)
    if existing is not None:
        st.delete_dir(staging)
        return existing
    ref.uri = st.display(final)
    marker = st.commit_dir(staging, final, {"dataset": ref.to_dict(),
                                            "committed_at": time.time()})
    winner = DatasetRef.from_dict(marker["dataset"])
    winner.uri = ref.uri
    return winner


# --- splitting --------------------------------------------------------------------------
def split_mask(ref: DatasetRef, test_size: float, seed: int,
               stratify_column: Optional[str]) -> np.ndarray:
    """True for the rows that go to validation: a seeded permutation, per class of
    ``stratify_column`` when given (its proportions are kept)."""
    rng = np.random.default_rng(seed)
    n = ref.num_rows
    mask = np.zeros(n, dtype=bool)
    if stratify_column is None:
        k = min(max(int(round(n * test_size)), 1 if n > 1 else 0), max(n - 1, 0))
        mask[rng.permutation(n)[:k]] = True
        return mask
    labels = np.concatenate([b.column(0).to_numpy(zero_copy_only=False)
                             for b in scan(ref, [stratify_column])] or [[]])
    if len(labels) != n:
        raise ConfigError(f"Data set {ref.uri!r} has {len(labels)} rows but its reference "
                          f"says {n}: it changed after ingest; ingest it again.")
    for value in sorted(set(labels.tolist()), key=repr):
        idx = np.flatnonzero(labels == value)
        rng.shuffle(idx)
        mask[idx[:int(round(len(idx) * test_size))]] = True
    return mask


def write_split(st: Any, ref: DatasetRef, mask: np.ndarray, outputs: Dict[str, str],
                params: Dict[str, Any]) -> Dict[str, DatasetRef]:
    """Stream ``ref`` once into the ``train`` and ``validation`` outputs by ``mask``."""
    import pyarrow.compute as pc

    schema = None  # the files' own schema (read from the first batch)
    sinks: Dict[str, Any] = {}
    stagings = {k: staging_dir(st, p.rsplit("/", 1)[0]) for k, p in outputs.items()}
    offset = 0
    try:
        for batch in scan(ref):
            if schema is None:
                schema = batch.schema
                sinks = {k: ParquetSink(st, stagings[k], schema) for k in outputs}
            m = pa.array(mask[offset:offset + batch.num_rows])
            sinks["validation"].write(batch.filter(m))
            sinks["train"].write(batch.filter(pc.invert(m)))
            offset += batch.num_rows
        if not sinks:
            raise ConfigError(f"Data set {ref.uri!r} is empty: nothing to split.")
        out = {}
        for key, path in outputs.items():
            rows, fp = sinks[key].close()
            new = DatasetRef(uri=st.display(path), format="parquet", num_rows=rows,
                             schema=schema_dict(schema), fingerprint=fp,
                             name=f"{ref.name or 'data'}-{key}",
                             metadata={**params, "split": key, "parent": ref.fingerprint})
            out[key] = commit(st, stagings[key], path, new)
        return out
    except BaseException:
        for path in stagings.values():
            st.delete_dir(path)
        raise
