"""Turning the trainer's ``datasets=`` into per-worker shards (Ray Data).

- :func:`to_ray_dataset`: a Dataset, a pandas DataFrame, or a path/URI (local or
  ``s3://`` …) of Parquet or CSV files — one file, a directory of them, or a list.
- :func:`prepare_datasets`: the trainer's datasets as Ray Datasets, with its preprocessor
  fitted on ``"train"`` and applied to all of them (driver side, lazily).
- :func:`make_shards`: for each dataset, one ``DataIterator`` per worker. Split datasets
  use ``streaming_split(n, equal=True)``: blocks stream to the workers as they are read,
  nothing is loaded whole, and every worker gets the same number of rows (so DDP ranks
  run the same number of steps); the last ``count % n`` rows are dropped and the log
  says how many when the count is known without executing the dataset.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Dict, List, Optional, Sequence

from engine.config import DataConfig
from engine.exceptions import ConfigError

logger = logging.getLogger("engine")

_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zst", ".tsv")
_PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")


# --- inputs -----------------------------------------------------------------------------
def check_dataset_inputs(datasets: Dict[str, Any]) -> None:
    """Fail at trainer construction, not after the workers started, on an input that
    :func:`to_ray_dataset` cannot read (nothing is read here)."""
    for name, data in datasets.items():
        if not isinstance(name, str):
            raise ConfigError(f"datasets keys are names (str), got {name!r}.")
        if isinstance(data, (str, os.PathLike)) or (
                isinstance(data, (list, tuple)) and data
                and all(isinstance(p, (str, os.PathLike)) for p in data)):
            continue
        kind = f"{type(data).__module__}.{type(data).__name__}"
        if kind.startswith(("ray.data.", "pandas.")):
            continue  # a Dataset (or MaterializedDataset) / a DataFrame: checked when used
        raise ConfigError(
            f"datasets[{name!r}] is a {type(data).__name__}: pass a ray.data.Dataset, a "
            "pandas DataFrame, or a path/URI to Parquet or CSV files."
        )


def to_ray_dataset(name: str, data: Any) -> Any:
    """A ``ray.data.Dataset`` from a Dataset, a pandas DataFrame or Parquet/CSV path(s).

    A path may be local or a URI (``s3://bucket/prefix``, ``gs://`` …), a file or a
    directory; a directory holding only CSV files is read as CSV, otherwise as Parquet.
    """
    import ray.data

    if isinstance(data, ray.data.Dataset):
        return data
    try:
        import pandas as pd

        if isinstance(data, pd.DataFrame):
            return ray.data.from_pandas(data)
    except ImportError:
        pass
    if isinstance(data, (str, os.PathLike)):
        paths: List[str] = [os.fspath(data)]
    elif (isinstance(data, (list, tuple)) and data
          and all(isinstance(p, (str, os.PathLike)) for p in data)):
        paths = [os.fspath(p) for p in data]
    else:
        raise ConfigError(
            f"datasets[{name!r}] is a {type(data).__name__}: pass a ray.data.Dataset, a "
            "pandas DataFrame, or a path/URI to Parquet or CSV files."
        )
    names = _file_names(paths)
    fmt = _file_format(names)
    filesystem, paths = _with_filesystem(paths)
    logger.debug("datasets[%r]: reading %s as %s", name, paths, fmt)
    arg = paths[0] if len(paths) == 1 else paths
    kwargs = {"filesystem": filesystem} if filesystem is not None else {}
    if fmt == "csv":
        return ray.data.read_csv(arg, **kwargs)
    return _read_parquet(arg, len(names), **kwargs)


def _with_filesystem(paths: List[str]) -> Any:
    """``(filesystem, paths inside it)`` for object-store URIs, resolved by the storage
    layer: an endpoint or credentials in the URI, or the filesystem this process opened
    for a bare URI of that bucket (a pipeline's data set reference), travel to Ray Data's
    read tasks in the (pickled) filesystem, which a bare URI in another process would
    not find. Local paths, and URIs the storage layer cannot open, go to Ray Data as
    they are: ``(None, paths)``."""
    from engine._internal.storage import filesystem as _storage
    from engine.exceptions import StorageError

    if not all(_storage.is_uri(p) and not p.startswith(("file://", "memory://"))
               for p in paths):
        return None, paths
    try:
        resolved = [_storage.resolve(p) for p in paths]
    except StorageError:
        return None, paths  # Ray Data's own error says what is wrong with the URI
    filesystems = {id(fs) for fs, _ in resolved}
    if len(filesystems) != 1:
        return None, paths  # several stores in one data set: each URI on its own
    return resolved[0][0], [inner for _, inner in resolved]


# Ray Data's Parquet reader starts a pool of footer-reading actors (32 by default) for
# every execution, i.e. every epoch of every shard: seconds of process start-up on a
# small node for a dataset of a few files. One actor per 10 files (the reader's footer
# batch) is as parallel as the listing gets; the environment variable still wins.
_FOOTER_ACTORS_ENV = "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"
_FILES_PER_FOOTER_ACTOR = 10
_MAX_FOOTER_ACTORS = 32
_env_lock = threading.Lock()


def _read_parquet(arg: Any, num_files: int, **kwargs: Any) -> Any:
    import ray.data

    if _FOOTER_ACTORS_ENV in os.environ or num_files <= 0:
        return ray.data.read_parquet(arg, **kwargs)
    actors = max(1, min(_MAX_FOOTER_ACTORS, -(-num_files // _FILES_PER_FOOTER_ACTOR)))
    with _env_lock:  # read when read_parquet builds its file indexer, here on the driver
        os.environ[_FOOTER_ACTORS_ENV] = str(actors)
        try:
            return ray.data.read_parquet(arg, **kwargs)
        finally:
            os.environ.pop(_FOOTER_ACTORS_ENV, None)


def _file_names(paths: Sequence[str]) -> List[str]:
    """Lower-cased names of the files: a file path's own, a directory's listing."""
    names: List[str] = []
    for path in paths:
        lowered = path.lower().rstrip("/")
        if lowered.endswith(_CSV_SUFFIXES) or lowered.endswith(_PARQUET_SUFFIXES):
            names.append(lowered)
            continue
        listed = _list_files(path)
        if listed:
            names.extend(n.lower() for n in listed)
        else:
            names.append(lowered)
    return names


def _file_format(names: Sequence[str]) -> str:
    """``"csv"`` when the files are all CSV, else ``"parquet"``."""
    has_csv = any(n.endswith(_CSV_SUFFIXES) for n in names)
    has_parquet = any(n.endswith(_PARQUET_SUFFIXES) for n in names)
    return "csv" if has_csv and not has_parquet else "parquet"


def _list_files(path: str, limit: int = 100_000) -> List[str]:
    """File names under a directory (local or URI); empty when it is not one."""
    import pyarrow.fs as pafs

    from engine._internal.storage import filesystem as _storage

    try:
        fs, inner = _storage.resolve(path)
        if fs.get_file_info(inner).type != pafs.FileType.Directory:
            return []
        infos = fs.get_file_info(pafs.FileSelector(inner, recursive=True))
    except Exception:  # unreachable store, no credentials …: let Ray Data report it
        return []
    return [i.base_name for i in infos[:limit] if i.type == pafs.FileType.File
            and not i.base_name.startswith((".", "_"))]  # as Ray Data skips them


# --- preprocessing ------------------------------------------------------------------------
def prepare_datasets(datasets: Dict[str, Any], preprocessor: Optional[Any] = None
                     ) -> Dict[str, Any]:
    """The datasets as Ray Datasets; with a preprocessor, fitted on ``"train"`` (unless it
    is fitted already) and applied to every dataset (lazily, as ``map_batches``)."""
    if preprocessor is None:
        return dict(datasets)
    from engine.preprocessors import as_preprocessor

    preprocessor = as_preprocessor(preprocessor)
    if not preprocessor.fitted and "train" not in datasets:
        raise ConfigError(
            f"The preprocessor {preprocessor!r} is not fitted and there is no "
            f"datasets['train'] to fit it on (passed: {sorted(datasets) or 'none'}): pass a "
            "'train' dataset or fit the preprocessor first."
        )
    from engine._internal.ray_runtime.start import ensure_ray

    ensure_ray()  # fitting runs Ray Data: start trainyard's Ray, not Ray Data's default
    out = {name: to_ray_dataset(name, data) for name, data in datasets.items()}
    if not preprocessor.fitted:
        logger.info("Fitting %s on datasets['train'].", type(preprocessor).__name__)
        preprocessor.fit(out["train"])
    return {name: preprocessor.transform(ds) for name, ds in out.items()}


# --- shards -----------------------------------------------------------------------------
def known_row_count(ds: Any) -> Optional[int]:
    """The dataset's row count if it is known without executing it (materialized data,
    in-memory sources such as ray.data.range), else None."""
    try:
        count = ds._meta_count()  # never triggers execution
    except Exception:
        return None
    return int(count) if count is not None else None


def _parquet_footer_row_count(data: Any, max_files: int = 100) -> Optional[int]:
    """Rows of Parquet path input, from the files' footers (no data is read); None for
    other inputs, CSV, more than ``max_files`` files, or any error."""
    if isinstance(data, (str, os.PathLike)):
        paths = [os.fspath(data)]
    elif isinstance(data, (list, tuple)) and all(isinstance(p, (str, os.PathLike))
                                                 for p in data):
        paths = [os.fspath(p) for p in data]
    else:
        return None
    try:
        import pyarrow.dataset as pads

        from engine._internal.storage import filesystem as _storage

        if _file_format(_file_names(paths)) != "parquet":
            return None
        total = 0
        for path in paths:
            fs, inner = _storage.resolve(path)
            pq = pads.dataset(inner, filesystem=fs, format="parquet")
            if len(pq.files) > max_files:
                return None
            total += pq.count_rows()
        return total
    except Exception:
        return None


def make_shards(datasets: Dict[str, Any], data_config: DataConfig, n: int,
                read_files_directly: bool = False) -> Dict[str, List[Any]]:
    """For each dataset, one iterator per worker: split ones stream disjoint shards.

    With ``read_files_directly`` (a loop that reads its shards with
    ``gbdt.data.read_shard``), a dataset of local Parquet files becomes one
    ``ParquetShard`` per worker instead, which the worker reads itself with pyarrow
    (``engine._internal.data.parquet_shards``); the split is the same equal one.
    """
    out: Dict[str, List[Any]] = {}
    for name, data in datasets.items():
        files = _direct_files(data) if read_files_directly else None
        if files is not None:
            from engine._internal.data.parquet_shards import plan_file_shards

            split = data_config.should_split(name) and n > 1
            out[name], count = plan_file_shards(files, n, split)
            if split:
                _log_split(name, count, n)
            continue
        ds = to_ray_dataset(name, data)
        if data_config.should_split(name) and n > 1:
            count = known_row_count(ds)
            if count is None and ds is not data:
                count = _parquet_footer_row_count(data)
            _log_split(name, count, n)
            out[name] = ds.streaming_split(n, equal=True)
        else:
            out[name] = [ds.iterator() for _ in range(n)]
    return out


def materialize_splits(datasets: Dict[str, Any], data_config: DataConfig, n: int
                       ) -> Dict[str, List[Any]]:
    """For each dataset, one materialised dataset per worker: read (and preprocessed)
    into the object store now, split ones cut into ``n`` equal parts. Iterating them
    later runs no CPU task (``data.plan`` MATERIALIZE)."""
    out: Dict[str, List[Any]] = {}
    for name, data in datasets.items():
        ds = to_ray_dataset(name, data).materialize()
        if data_config.should_split(name) and n > 1:
            count = ds.count()
            parts = ds.split(n, equal=True)
            logger.info("Dataset %r: %d rows read into the object store and split into %d "
                        "equal shards of %d rows%s.", name, count, n, count // n,
                        f" ({count % n} dropped)" if count % n else "")
            out[name] = parts
        else:
            out[name] = [ds] * n
    return out


def _direct_files(data: Any) -> Optional[List[str]]:
    from engine._internal.data.parquet_shards import local_parquet_files

    try:
        return local_parquet_files(data)
    except Exception:  # an unreadable footer …: Ray Data reports it as before
        return None


def _log_split(name: str, count: Optional[int], n: int) -> None:
    if count is None:
        logger.info(
            "Dataset %r is split into %d equal shards (streaming_split equal=True): the "
            "last rows that do not fill a whole round (at most %d) are dropped; the row "
            "count is not known before the dataset is read.", name, n, n - 1)
        return
    dropped = count % n
    if dropped:
        logger.warning(
            "Dataset %r: %d rows split into %d equal shards of %d rows; %d row%s dropped "
            "(streaming_split equal=True keeps every worker at the same number of rows).",
            name, count, n, count // n, dropped, "" if dropped == 1 else "s")
    else:
        logger.info("Dataset %r: %d rows split into %d equal shards of %d rows; none "
                    "dropped.", name, count, n, count // n)
