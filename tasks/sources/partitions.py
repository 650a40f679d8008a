"""Hive-partitioned Parquet sources (``events/date=2026-11-25/part-0.parquet``), read whole
or through a partition filter and a time window, and incrementally.

The data set written from such a source keeps one directory per partition
(``p00000/``, ``p00001/`` … in partition order, the partition keys as string columns in
every file), and its fingerprint is composed from the partitions' own fingerprints:
SHA-256 over the schema and each partition's (row fingerprint, row count) in partition
order. So the fingerprint of a window follows from what is known about its partitions,
without reading them again.

Incremental ingest keeps a state file per source (``<storage>/datasets/_sources/``):
for each partition it ingested, the fingerprint of its file listing (names, sizes,
modification times), its row fingerprint and where its files live in a committed data
set. A partition whose listing has not changed is not read again: its files are linked
(local disk) or copied server-side (object stores) into the new data set; when every
partition of the window is known and that data set is committed already, it is returned
without reading or writing anything. The state is only a cache: a partition whose old
files are gone is read from the source again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import unquote

import pyarrow as pa

from engine import storage as _storage
from engine.exceptions import ConfigError
from tasks import layout
from tasks.sources import files
from tasks.sources._window import Window, make_window, to_datetime
from tasks.refs import DatasetRef

logger = logging.getLogger("tasks")

STATE_DIR = "_sources"
_PART_DIR = "p{:05d}"


@dataclass
class Partition:
    """One partition directory: its ``key`` (``date=2026-11-25``), values and files."""

    key: str
    values: Dict[str, str]
    files: List[Tuple[str, int, int]]  # (path in the filesystem, size, mtime in ns)

    @property
    def listing(self) -> str:
        """A fingerprint of the file listing: changes when a file is added, removed,
        resized or rewritten (its modification time)."""
        rows = [[p.rsplit("/", 1)[-1], size, mtime] for p, size, mtime in self.files]
        return hashlib.sha256(json.dumps(rows).encode()).hexdigest()

    @property
    def nbytes(self) -> int:
        return sum(size for _, size, _ in self.files)


# --- discovery --------------------------------------------------------------------------
def source_filesystem(source: str) -> Tuple[Any, str]:
    """``(pyarrow filesystem, path)`` of a source (tests wrap it to count reads)."""
    return _storage.resolve(source if _storage.is_uri(source)
                            else os.path.abspath(os.path.expanduser(source)))


def is_partitioned(source: str) -> bool:
    """Whether ``source`` is a directory whose entries are ``key=value`` directories."""
    import pyarrow.fs as pafs

    try:
        fs, inner = source_filesystem(source)
        infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
    except (OSError, ValueError):
        return False
    dirs = [i for i in infos if not i.base_name.startswith(("_", "."))]
    return bool(dirs) and all(i.type == pafs.FileType.Directory and "=" in i.base_name
                              for i in dirs)


def discover(fs: Any, inner: str, shown: str) -> Tuple[List[str], List[Partition]]:
    """The partition keys and every partition (sorted by value) under ``inner``: one
    recursive listing, no file opened.

    Raises:
        ConfigError: no partition directories, or partitions with different keys.
    """
    import pyarrow.fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(inner, recursive=True, allow_not_found=True))
    prefix = inner.rstrip("/") + "/"
    parts: Dict[str, Partition] = {}
    keys: Optional[List[str]] = None
    for info in infos:
        rel = info.path[len(prefix):].split("/")
        if info.type != pafs.FileType.File or any(p.startswith((".", "_")) for p in rel):
            continue
        dirs = rel[:-1]
        pairs = [d.split("=", 1) for d in dirs]
        if not dirs or any(len(p) != 2 for p in pairs):
            raise ConfigError(f"ingest: {shown!r} mixes partition directories (key=value) "
                              f"with other files ({'/'.join(rel)}): a Hive-partitioned data "
                              "set keeps every data file under key=value directories.")
        these = [k for k, _ in pairs]
        if keys is None:
            keys = these
        elif these != keys:
            raise ConfigError(f"ingest: {shown!r} has partitions by {keys} and by {these}: "
                              "every partition must have the same keys in the same order.")
        key = "/".join(dirs)
        part = parts.setdefault(key, Partition(key, {k: unquote(v) for k, v in pairs}, []))
        part.files.append((info.path, int(info.size or 0), int(info.mtime_ns or 0)))
    if not parts or keys is None:
        raise ConfigError(f"ingest: {shown!r} does not exist or holds no partition "
                          "directories with data files.")
    for part in parts.values():
        part.files.sort()
    return keys, sorted(parts.values(), key=lambda p: [_sort_key(p.values[k]) for k in keys])


def _sort_key(value: str) -> Tuple[int, Any]:
    try:
        return (0, float(value))
    except ValueError:
        return (1, value)


def select(parts: List[Partition], keys: List[str], partition_filter: Any,
           window: Optional[Window], shown: str) -> List[Partition]:
    """The partitions that pass ``partition_filter`` (``{key: value or [values]}``) and
    lie in ``window``.

    Raises:
        ConfigError: a filter on a key that does not exist, a window value that is not
            a date, or nothing selected (the message shows what there is).
    """
    wanted = _filter(partition_filter, keys, shown)
    out = []
    for part in parts:
        if any(part.values[k] not in allowed for k, allowed in wanted.items()):
            continue
        if window is not None and not window.contains(
                to_datetime(part.values[window.column], f"partition {part.key!r} value")):
            continue
        out.append(part)
    if not out:
        span = f"{parts[0].key} … {parts[-1].key}" if len(parts) > 1 else parts[0].key
        where = f" in window {window.describe()}" if window else ""
        filt = f" with partition_filter {partition_filter!r}" if wanted else ""
        raise ConfigError(f"ingest: no partitions of {shown!r}{where}{filt}; it has "
                          f"{len(parts)} partitions ({span}). Widen the window or the filter.")
    return out


def _filter(partition_filter: Any, keys: List[str], shown: str) -> Dict[str, set]:
    if partition_filter is None:
        return {}
    if not isinstance(partition_filter, Mapping):
        raise ConfigError(f"partition_filter {partition_filter!r}: use a dict of partition "
                          "key -> value or list of values, e.g. {'region': ['eu', 'us']}.")
    unknown = sorted(set(partition_filter) - set(keys))
    if unknown:
        raise ConfigError(f"partition_filter keys {unknown} are not partition keys of "
                          f"{shown!r} (its keys: {keys}).")
    return {k: {str(x) for x in (v if isinstance(v, (list, tuple, set)) else [v])}
            for k, v in partition_filter.items()}


# --- schemas ----------------------------------------------------------------------------
def file_schema(fs: Any, part: Partition) -> pa.Schema:
    """The unified schema of a partition's files (their footers only)."""
    import pyarrow.parquet as pq

    schemas = []
    for path, _, _ in part.files:
        with fs.open_input_file(path) as f:
            schemas.append(pq.read_schema(f).remove_metadata())
    return pa.unify_schemas(schemas)


def target_schema(schemas: Sequence[pa.Schema], keys: List[str]) -> pa.Schema:
    """The data set's schema: the files' columns (unified over the partitions), then the
    partition keys as strings (a column of the same name in the files is replaced)."""
    unified = pa.unify_schemas(list(schemas)) if schemas else pa.schema([])
    fields = [f for f in unified if f.name not in keys]
    return pa.schema(fields + [pa.field(k, pa.string()) for k in keys])


def encode_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def combined_fingerprint(schema: pa.Schema, parts: Sequence[Tuple[str, int]]) -> str:
    """SHA-256 over the schema and each partition's (fingerprint, rows), in order."""
    return hashlib.sha256(json.dumps(
        {"schema": [[f.name, str(f.type)] for f in schema],
         "partitions": [[fp, rows] for fp, rows in parts]}).encode()).hexdigest()


def partition_batches(fs: Any, part: Partition, schema: pa.Schema,
                      keys: List[str]) -> Iterator[pa.RecordBatch]:
    """A partition's rows in ``schema``: file columns cast, missing ones null, the
    partition keys as constant string columns."""
    import pyarrow.dataset as pds

    file_fields = [f for f in schema if f.name not in keys]
    dataset = pds.dataset([p for p, _, _ in part.files], filesystem=fs, format="parquet")
    present = [f.name for f in file_fields if f.name in dataset.schema.names]
    for batch in dataset.to_batches(columns=present, batch_size=files.BATCH_ROWS):
        n = batch.num_rows
        arrays = [batch.column(batch.schema.get_field_index(f.name)).cast(f.type)
                  if f.name in present else pa.nulls(n, f.type) for f in file_fields]
        arrays += [pa.array([part.values[k]] * n, pa.string()) for k in keys]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


# --- state ------------------------------------------------------------------------------
class SourceState:
    """What was ingested from one source, per partition (a cache: losing it costs a
    re-read, never wrong data)."""

    def __init__(self, st: _storage.Storage, datasets_dir: str, shown: str) -> None:
        self.st, self.datasets_dir, self.shown = st, datasets_dir, shown
        digest = hashlib.sha256(shown.encode()).hexdigest()[:16]
        self.path = _storage.join(datasets_dir, STATE_DIR, f"{digest}.json")
        data = st.read_json(self.path) or {}
        self.partitions: Dict[str, Dict[str, Any]] = dict(data.get("partitions") or {})

    def known(self, part: Partition) -> Optional[Dict[str, Any]]:
        """The entry of ``part`` if its files are unchanged since it was ingested."""
        entry = self.partitions.get(part.key)
        return entry if entry and entry.get("listing") == part.listing else None

    def record(self, part: Partition, entry: Dict[str, Any]) -> None:
        self.partitions[part.key] = {**entry, "listing": part.listing}

    def save(self) -> None:
        self.st.write_json_atomic(self.path, {"source": self.shown, "updated_at": time.time(),
                                              "partitions": self.partitions})


# --- ingest -----------------------------------------------------------------------------
def ingest_partitioned(source: str, *, storage: Optional[str], name: Optional[str],
                       partition_filter: Any = None, window: Any = None, since: Any = None,
                       until: Any = None, incremental: bool = False) -> DatasetRef:
    """``tasks.ingest`` of a Hive-partitioned Parquet directory (module docstring)."""
    shown = _storage.redact(source)
    fs, inner = source_filesystem(source)
    keys, parts = discover(fs, inner, shown)
    win = make_window(window, since, until, keys, shown)
    selected = select(parts, keys, partition_filter, win, shown)
    st = _storage.Storage.from_path(layout.sub(_storage.default_root(storage),
                                               layout.DATASETS_DIR))
    parent = st.root
    state = SourceState(st, parent, shown)
    known = {p.key: state.known(p) for p in selected} if incremental else {}
    footers = {p.key: decode_schema(known[p.key]["file_schema"]) if known.get(p.key)
               else file_schema(fs, p) for p in selected}
    schema = target_schema([footers[p.key] for p in selected], keys)
    reuse = {k: e for k, e in known.items() if e and e.get("schema") == encode_schema(schema)}
    base = inner.rstrip("/").rsplit("/", 1)[-1]
    name = layout.clean_name(name or base.split(".", 1)[0] or "data", "data set name")
    metadata = {"source": shown, "source_format": "parquet", "partitioning": "hive",
                "partition_keys": keys, "partitions": len(selected),
                "first_partition": selected[0].key, "last_partition": selected[-1].key,
                "window": win.describe() if win else None,
                "partition_filter": partition_filter}
    if len(reuse) == len(selected):  # every partition known: maybe nothing to do at all
        fp = combined_fingerprint(schema, [(reuse[p.key]["fingerprint"], reuse[p.key]["rows"])
                                           for p in selected])
        existing = files.load_manifest(st, _storage.join(parent, f"{name}-{fp[:12]}"))
        if existing is not None:
            logger.info("Ingest of %s: no partition changed; the committed data set %s "
                        "(%d partitions) is returned as it is.", shown, existing.uri,
                        len(selected))
            return existing
    return _write(fs, st, parent, selected, keys, schema, reuse, name, metadata, state,
                  footers)


def _write(fs: Any, st: _storage.Storage, parent: str, selected: List[Partition],
           keys: List[str], schema: pa.Schema, reuse: Dict[str, Dict[str, Any]], name: str,
           metadata: Dict[str, Any], state: SourceState,
           footers: Dict[str, pa.Schema]) -> DatasetRef:
    """Stage every partition (linked from a committed data set, or read), commit, and
    record the partitions in the source's state."""
    staging = files.staging_dir(st, parent)
    entries: List[Dict[str, Any]] = []
    read = []
    try:
        for i, part in enumerate(selected):
            directory = _storage.join(staging, _PART_DIR.format(i))
            entry = reuse.get(part.key)
            if entry is None or not _link(st, parent, entry, directory):
                entry = _read_partition(fs, st, part, keys, schema, directory)
                entry["file_schema"] = encode_schema(footers[part.key])
                read.append(part)
            entries.append(entry)
        fp = combined_fingerprint(schema, [(e["fingerprint"], e["rows"]) for e in entries])
        final = _storage.join(parent, f"{name}-{fp[:12]}")
        ref = DatasetRef(uri=st.display(final), format="parquet",
                         num_rows=sum(e["rows"] for e in entries),
                         schema=files.schema_dict(schema), fingerprint=fp, name=name,
                         metadata=metadata)
        ref = files.commit(st, staging, final, ref)
    except BaseException:
        st.delete_dir(staging)
        raise
    committed = ref.uri.rstrip("/").rsplit("/", 1)[-1]
    for i, (part, entry) in enumerate(zip(selected, entries)):
        state.record(part, {**entry, "dir": f"{committed}/{_PART_DIR.format(i)}"})
    state.save()
    logger.info("Ingested %s: %d of %d partitions read (%d files, %d bytes), %d reused; "
                "%d rows → %s", metadata["source"], len(read), len(selected),
                sum(len(p.files) for p in read), sum(p.nbytes for p in read),
                len(selected) - len(read), ref.num_rows, ref.uri)
    return ref


def _read_partition(fs: Any, st: _storage.Storage, part: Partition, keys: List[str],
                    schema: pa.Schema, directory: str) -> Dict[str, Any]:
    sink = files.ParquetSink(st, directory, schema)
    for batch in partition_batches(fs, part, schema, keys):
        sink.write(batch)
    rows, fp = sink.close()
    names = sorted(n for n in st.list_dir(directory) if n.endswith(".parquet"))
    return {"fingerprint": fp, "rows": rows, "files": names, "schema": encode_schema(schema)}


def _link(st: _storage.Storage, parent: str, entry: Dict[str, Any], directory: str) -> bool:
    """Put a known partition's committed files into ``directory`` without reading them:
    a hard link on a local disk, a server-side copy on an object store. False when
    they are gone (the data set was deleted): the caller reads the source again."""
    source_dir = _storage.join(parent, entry["dir"])
    try:
        st.makedirs(directory)
        for fname in entry["files"]:
            src, dst = _storage.join(source_dir, fname), _storage.join(directory, fname)
            if st.local:
                try:
                    os.link(src, dst)
                except OSError:  # another device, or links not allowed
                    st.fs.copy_file(src, dst)
            else:
                st.fs.copy_file(src, dst)
    except (FileNotFoundError, OSError) as exc:
        logger.info("Partition files in %s are gone (%s): reading it again.", source_dir, exc)
        st.delete_dir(directory)
        return False
    return True
