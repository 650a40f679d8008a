"""From a path or URI to ``(pyarrow filesystem, path inside it)``: the storage root,
``memory://``, S3-compatible endpoints, and the filesystems a process has opened.

``memory://name/...`` is RAM-backed storage on this machine: a directory under
``/dev/shm/trainyard-memory`` (``TRAINYARD_MEMORY_STORAGE_ROOT`` overrides), shared by the
driver and its worker processes and gone at reboot. pyarrow's own ``memory://``
filesystem lives inside one process, and trainyard's ranks are separate processes, so it
could not hold what they write; a tmpfs directory can. It is single-machine storage: on a
cluster whose workers run on other hosts the writability check rejects it, as any local
path that is not shared.

S3-compatible servers: ``s3://bucket/prefix?endpoint_override=host:port&scheme=http``.
The endpoint lives in the ``pyarrow`` filesystem object (which pickles its options, so a
worker or a pickled Checkpoint keeps it); displayed URIs (``Checkpoint.uri``,
``Result.path``) are ``s3://bucket/prefix`` with no credentials and no query. A bare
``s3://bucket/...`` URI reuses the filesystem this process last opened for that bucket
with an explicit endpoint or credentials, or received pickled (workers do); in a fresh
process set ``AWS_ENDPOINT_URL_S3`` (or ``AWS_ENDPOINT_URL``), which pyarrow honours, or
pass ``filesystem=``.
"""

from __future__ import annotations

import os
import tempfile
import threading
from typing import Any, Dict, Optional, Tuple
from urllib.parse import urlsplit

from engine import constants
from engine._internal.storage.uris import learn_secrets, redact, safe_reason
from engine.exceptions import StorageError


class _PyarrowFs:
    """``pyarrow.fs``, imported on first use. pyarrow (numpy with it) was most of what
    ``import engine`` cost (0.11 of 0.12 s), paid by every process that imports engine:
    each training worker, and Airflow's parse of each DAG file, also where nothing
    touches storage (a worker that only reports metrics)."""

    def __getattr__(self, name: str) -> Any:  # only for a name not yet looked up
        import pyarrow.fs

        value = getattr(pyarrow.fs, name)
        setattr(self, name, value)  # later lookups are a plain attribute read
        return value


pafs: Any = _PyarrowFs()

REMOTE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "abfs", "abfss")
# Filesystems without directories or rename (pyarrow ``type_name``).
OBJECT_STORE_TYPES = ("s3", "gcs")
MEMORY_ROOT_ENV_VAR = constants.MEMORY_STORAGE_ROOT_ENV_VAR

# (scheme, bucket) -> the filesystem opened for it from a URI with an endpoint or
# credentials, so that a bare URI of the same bucket (Checkpoint.uri) reopens it.
_known_filesystems: Dict[Tuple[str, str], pafs.FileSystem] = {}
_registry_lock = threading.Lock()


def is_uri(path: Any) -> bool:
    """Whether ``path`` is a URI (``scheme://...``) rather than a local path."""
    return "://" in str(path)


def join(*parts: str) -> str:
    """Join path parts with ``/`` (paths inside a pyarrow filesystem, local ones too)."""
    return "/".join(p.rstrip("/") for p in parts if p)


def default_root(storage: Optional[str] = None, filesystem: Any = None) -> str:
    """The storage root: ``storage``, else ``$TRAINYARD_STORAGE_PATH``, else
    ``~/trainyard_results``.

    Args:
        storage: An explicit root (``RunConfig.storage_path``, a task's ``storage``).
        filesystem: The pyarrow filesystem the root lives in
            (``RunConfig.storage_filesystem``); the root is then a path inside it and
            comes back as given.

    Returns:
        A URI unchanged (query and credentials kept: the filesystem is opened from it),
        or an absolute, normalised local path (``~`` and ``file://`` resolved).

    Raises:
        StorageError: a relative local path (workers elsewhere would not find it).
    """
    from_env = constants.get(constants.STORAGE_PATH_ENV_VAR)
    root = os.fspath(storage) if storage else from_env or constants.DEFAULT_STORAGE_PATH
    if filesystem is not None or (is_uri(root) and not root.startswith("file://")):
        return root
    if storage:
        return _local_path(root)
    try:
        return _local_path(root)
    except StorageError:  # say where the relative path came from
        raise StorageError(
            f"${constants.STORAGE_PATH_ENV_VAR}={root!r} is a relative path: set it to an "
            "absolute path or a URI such as s3://bucket/prefix, so every worker resolves "
            "the same place.") from None


def resolve(path_or_uri: str, filesystem: Optional[pafs.FileSystem] = None
            ) -> Tuple[pafs.FileSystem, str]:
    """``(filesystem, path inside it)`` for a local path or a URI.

    Args:
        path_or_uri: An absolute local path, ``file://``, ``memory://``, ``s3://``,
            ``gs://`` … (an S3 URI may carry ``?endpoint_override=host:port``).
        filesystem: Use this filesystem; ``path_or_uri`` is then a path inside it (a URI
            is reduced to its bucket and key).

    Raises:
        StorageError: for a relative local path or an unsupported URI.
    """
    path_or_uri = os.fspath(path_or_uri)
    if filesystem is not None:
        return filesystem, _inside(path_or_uri, filesystem)
    if path_or_uri.startswith("memory://"):
        path_or_uri = memory_storage_path(path_or_uri)
    if not is_uri(path_or_uri) or path_or_uri.startswith("file://"):
        return pafs.LocalFileSystem(), _local_path(path_or_uri)
    scheme = urlsplit(path_or_uri).scheme
    if scheme not in REMOTE_SCHEMES:
        raise StorageError(
            f"storage_path {redact(path_or_uri)!r} has an unsupported scheme {scheme!r}: use a "
            "local absolute path, s3://, gs://, or memory:// (RAM-backed, this machine)."
        )
    learn_secrets(path_or_uri)
    known = _known_filesystem(path_or_uri)
    if known is not None:
        parts = urlsplit(path_or_uri)
        return known, (parts.netloc + parts.path).rstrip("/")
    try:
        fs, path = pafs.FileSystem.from_uri(path_or_uri)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError with the raw URI
        raise StorageError(
            f"Cannot open storage {redact(path_or_uri)!r} ({type(exc).__name__}: "
            f"{safe_reason(exc)}). Check the URI and credentials (for S3-compatible "
            "servers pass ?endpoint_override=host:port&scheme=http)."
        ) from None
    _remember(path_or_uri, fs)
    return fs, path.rstrip("/")


def _inside(path_or_uri: str, filesystem: pafs.FileSystem) -> str:
    """The path inside an explicitly given filesystem (a URI loses scheme and query)."""
    if not is_uri(path_or_uri):
        return path_or_uri
    parts = urlsplit(path_or_uri)
    if parts.scheme in REMOTE_SCHEMES:
        learn_secrets(path_or_uri)
        _remember(path_or_uri, filesystem, always=True)
    return (parts.netloc.rpartition("@")[2] + parts.path).rstrip("/")


def _local_path(path: str) -> str:
    local = os.path.expanduser(path[len("file://"):] if path.startswith("file://") else path)
    if not os.path.isabs(local):
        raise StorageError(
            f"storage_path {path!r} is a relative path: use an absolute path "
            f"(e.g. {os.path.abspath(local)!r}) or a URI such as s3://bucket/prefix, so "
            "every worker resolves the same place."
        )
    return os.path.normpath(local)


def _scheme_key(scheme: str) -> str:
    return "gcs" if scheme == "gs" else scheme


def _remember(uri: str, fs: pafs.FileSystem, always: bool = False) -> None:
    """Remember the filesystem of a URI that carries an endpoint or credentials (or that
    came with an explicit filesystem), so a bare URI of that bucket reopens it."""
    parts = urlsplit(uri)
    _userinfo, at, bucket = parts.netloc.rpartition("@")
    if bucket and (always or at or parts.query):
        with _registry_lock:
            _known_filesystems[(_scheme_key(parts.scheme), bucket)] = fs


def remember_filesystem(fs: pafs.FileSystem, path: str) -> None:
    """After unpickling (in a worker, or a process given a Checkpoint): let bare URIs of
    this object-store bucket reopen ``fs`` unless the process knows one already."""
    if fs.type_name in OBJECT_STORE_TYPES and path:
        with _registry_lock:
            _known_filesystems.setdefault((fs.type_name, path.split("/", 1)[0]), fs)


def _known_filesystem(uri: str) -> Optional[pafs.FileSystem]:
    parts = urlsplit(uri)
    if parts.query or "@" in parts.netloc:
        return None
    with _registry_lock:
        return _known_filesystems.get((_scheme_key(parts.scheme), parts.netloc))


def memory_storage_root() -> str:
    """Where ``memory://`` lives: ``$TRAINYARD_MEMORY_STORAGE_ROOT``, else
    ``/dev/shm/trainyard-memory`` (a tmpfs on Linux), else the temp directory."""
    root = constants.get(MEMORY_ROOT_ENV_VAR)
    if root:
        return os.path.abspath(os.path.expanduser(root))
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm/trainyard-memory"
    return os.path.join(tempfile.gettempdir(), "trainyard-memory")


def memory_storage_path(uri: str) -> str:
    """The local path behind a ``memory://`` URI (``memory://a/b`` -> ``<root>/a/b``)."""
    inner = uri[len("memory://"):].strip("/")
    if not inner or any(part in ("..", ".") for part in inner.split("/")):
        raise StorageError(
            f"storage_path {uri!r}: name a place inside memory storage, e.g. "
            "memory://experiments (no '.' or '..' parts).")
    return os.path.join(memory_storage_root(), *inner.split("/"))
