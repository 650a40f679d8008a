"""The one place that talks to storage (pyarrow.fs): local paths, s3://, gs://, memory://.

Every write that must survive a crash is atomic: files are written (and fsynced on local
disks), then made visible by a rename or a marker written last.

Object stores (S3, GCS) have no directories and no rename: files are written with one
PUT each (no directory-marker objects), "moving" is a server-side copy and delete per
file, and deleting a committed checkpoint removes its commit marker first, so a
half-deleted checkpoint never looks committed.

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

import functools
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

import pyarrow.fs as pafs

from engine import constants
from engine.exceptions import StorageError

_REMOTE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "abfs", "abfss")
# Filesystems without directories or rename (pyarrow ``type_name``).
_OBJECT_STORE_TYPES = ("s3", "gcs")
# Env variables whose values are secrets, scrubbed from any text the engine shows (key
# ids are identifiers, shown by the servers' own errors, and stay).
_SECRET_ENV_VARS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_MIN_SECRET_LEN = 6
_URI_RE = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")
_UPLOAD_THREADS = 8
logger = logging.getLogger("engine")

# --- retrying remote storage ----------------------------------------------------------
# An object store that stalls (a network blip, a server restarting, throttling) must not
# fail a run that would go on a few seconds later. Every leaf operation on a remote
# filesystem is retried with exponential backoff while its error looks transient, for
# up to $TRAINYARD_STORAGE_RETRY_S seconds (default 120); each is idempotent (a PUT of
# the same bytes, a delete, a move that checks whether it already happened).
RETRY_ENV_VAR = constants.STORAGE_RETRY_ENV_VAR
DEFAULT_RETRY_S = constants.DEFAULT_STORAGE_RETRY_S
_TRANSIENT = re.compile(
    r"NETWORK_CONNECTION|Timeout was reached|curlCode|timed out|Connection refused|"
    r"connection reset|Couldn't connect|Could not connect|SLOW_DOWN|SlowDown|"
    r"Service ?Unavailable|InternalError|RequestTimeout|Broken pipe|"
    r"HTTP response code: 5\d\d|error code: 5\d\d", re.IGNORECASE)
_retry_state = threading.local()


def is_transient(exc: BaseException) -> bool:
    """Whether a storage error is worth retrying (network, timeout, throttling, 5xx)."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError,
                        NotADirectoryError, FileExistsError)):
        return False
    return isinstance(exc, OSError) and bool(_TRANSIENT.search(str(exc)))


def _retry_budget() -> float:
    try:
        return float(os.environ.get(RETRY_ENV_VAR, DEFAULT_RETRY_S))
    except ValueError:
        return DEFAULT_RETRY_S


def _retrying(method):
    """Retry a remote ``Storage`` operation on transient errors (local ones run once).
    Nested retrying operations do not retry on their own: the outermost one does."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self.local or getattr(_retry_state, "active", False):
            return method(self, *args, **kwargs)
        _retry_state.active = True
        try:
            deadline = time.monotonic() + _retry_budget()
            delay, started, attempts = 0.25, time.monotonic(), 0
            while True:
                try:
                    out = method(self, *args, **kwargs)
                    if attempts:
                        logger.warning("Storage %s answered again after %.1f s (%s).",
                                       self.display(), time.monotonic() - started,
                                       method.__name__)
                    return out
                except Exception as exc:  # noqa: BLE001 - filtered just below
                    if not is_transient(exc) or time.monotonic() + delay > deadline:
                        raise
                    if not attempts:
                        logger.warning(
                            "Storage %s is not answering (%s: %s); retrying for up to "
                            "%.0f s ($%s).", self.display(), type(exc).__name__,
                            _safe_reason(exc)[:200], _retry_budget(), RETRY_ENV_VAR)
                    attempts += 1
                    time.sleep(delay)
                    delay = min(delay * 2, 8.0)
        finally:
            _retry_state.active = False

    return wrapper

_COPY_CHUNK = 8 * 1024 * 1024

# (scheme, bucket) -> the filesystem opened for it from a URI with an endpoint or
# credentials, so that a bare URI of the same bucket (Checkpoint.uri) reopens it.
_known_filesystems: Dict[Tuple[str, str], pafs.FileSystem] = {}
# Secrets seen in URIs (the password of user:password@), scrubbed from errors and logs.
_known_secrets: set = set()
_registry_lock = threading.Lock()


def redact(uri: str) -> str:
    """Drop credentials and query parameters from a URI before it is logged or raised."""
    parts = urlsplit(uri)
    if not parts.scheme or parts.scheme == "file":
        return uri
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def scrub(text: str) -> str:
    """``text`` with every URI redacted and every known secret value masked.

    Used on anything that reaches a log, an error message or the run record.
    """
    if not text:
        return text
    text = _URI_RE.sub(lambda m: redact(m.group(0)), text)
    secrets = {os.environ.get(name, "") for name in _SECRET_ENV_VARS}
    with _registry_lock:
        secrets |= _known_secrets
    for secret in sorted((s for s in secrets if len(s) >= _MIN_SECRET_LEN), key=len,
                         reverse=True):
        text = text.replace(secret, "***")
    return text


def is_uri(path: str) -> bool:
    return "://" in str(path)


def _scheme_key(scheme: str) -> str:
    return "gcs" if scheme == "gs" else scheme


def _learn_secrets(uri: str) -> None:
    """Note the password of a ``user:password@`` URI so that scrub() masks it."""
    userinfo, at, _ = urlsplit(uri).netloc.rpartition("@")
    _user, colon, password = userinfo.partition(":")
    if not (at and colon and password):
        return
    from urllib.parse import unquote

    with _registry_lock:
        _known_secrets.update((password, unquote(password)))


def _remember(uri: str, fs: pafs.FileSystem, always: bool = False) -> None:
    """Remember the filesystem of a URI that carries an endpoint or credentials (or that
    came with an explicit filesystem), so a bare URI of that bucket reopens it."""
    parts = urlsplit(uri)
    userinfo, at, bucket = parts.netloc.rpartition("@")
    if bucket and (always or at or parts.query):
        with _registry_lock:
            _known_filesystems[(_scheme_key(parts.scheme), bucket)] = fs


def remember_filesystem(fs: pafs.FileSystem, path: str) -> None:
    """After unpickling (in a worker, or a process given a Checkpoint): let bare URIs of
    this object-store bucket reopen ``fs`` unless the process knows one already."""
    if fs.type_name in _OBJECT_STORE_TYPES and path:
        with _registry_lock:
            _known_filesystems.setdefault((fs.type_name, path.split("/", 1)[0]), fs)


def _known_filesystem(uri: str) -> Optional[pafs.FileSystem]:
    parts = urlsplit(uri)
    if parts.query or "@" in parts.netloc:
        return None
    with _registry_lock:
        return _known_filesystems.get((_scheme_key(parts.scheme), parts.netloc))


def resolve(path_or_uri: str, filesystem: Optional[pafs.FileSystem] = None
            ) -> Tuple[pafs.FileSystem, str]:
    """Return ``(filesystem, path inside it)`` for a local path or a URI.

    Raises:
        StorageError: for a relative local path or an unsupported URI.
    """
    path_or_uri = os.fspath(path_or_uri)
    if filesystem is not None:
        if is_uri(path_or_uri):
            parts = urlsplit(path_or_uri)
            if parts.scheme in _REMOTE_SCHEMES:
                _learn_secrets(path_or_uri)
                _remember(path_or_uri, filesystem, always=True)
            path_or_uri = (parts.netloc.rpartition("@")[2] + parts.path).rstrip("/")
        return filesystem, path_or_uri
    if path_or_uri.startswith("memory://"):
        path_or_uri = memory_storage_path(path_or_uri)
    if not is_uri(path_or_uri) or path_or_uri.startswith("file://"):
        local = path_or_uri[len("file://"):] if path_or_uri.startswith("file://") else path_or_uri
        local = os.path.expanduser(local)
        if not os.path.isabs(local):
            raise StorageError(
                f"storage_path {path_or_uri!r} is a relative path: use an absolute path "
                f"(e.g. {os.path.abspath(local)!r}) or a URI such as s3://bucket/prefix, so "
                "every worker resolves the same place."
            )
        return pafs.LocalFileSystem(), os.path.normpath(local)
    scheme = urlsplit(path_or_uri).scheme
    if scheme not in _REMOTE_SCHEMES:
        raise StorageError(
            f"storage_path {redact(path_or_uri)!r} has an unsupported scheme {scheme!r}: use a "
            "local absolute path, s3://, gs://, or memory:// (RAM-backed, this machine)."
        )
    _learn_secrets(path_or_uri)
    known = _known_filesystem(path_or_uri)
    if known is not None:
        parts = urlsplit(path_or_uri)
        return known, (parts.netloc + parts.path).rstrip("/")
    try:
        fs, path = pafs.FileSystem.from_uri(path_or_uri)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError with the raw URI
        raise StorageError(
            f"Cannot open storage {redact(path_or_uri)!r} ({type(exc).__name__}: "
            f"{_safe_reason(exc)}). Check the URI "
            "and credentials (for S3-compatible servers pass "
            "?endpoint_override=host:port&scheme=http)."
        ) from None
    _remember(path_or_uri, fs)
    return fs, path.rstrip("/")


MEMORY_ROOT_ENV_VAR = constants.MEMORY_STORAGE_ROOT_ENV_VAR


def memory_storage_root() -> str:
    """Where ``memory://`` lives: ``$TRAINYARD_MEMORY_STORAGE_ROOT``, else
    ``/dev/shm/trainyard-memory`` (a tmpfs on Linux), else the temp directory."""
    root = os.environ.get(MEMORY_ROOT_ENV_VAR)
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


def is_local(fs: pafs.FileSystem) -> bool:
    return isinstance(fs, pafs.LocalFileSystem)


def join(*parts: str) -> str:
    return "/".join(p.rstrip("/") for p in parts if p)


def _fsync_path(path: str, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _copy_local_file_durable(src: str, dst: str) -> None:
    # copyfile uses the kernel's zero-copy path (sendfile / copy_file_range) on Linux.
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def list_files(local_dir: str) -> List[str]:
    """Relative paths of the files under a local directory, sorted."""
    out = []
    for root, _dirs, files in os.walk(local_dir):
        for name in files:
            out.append(os.path.relpath(os.path.join(root, name), local_dir))
    return sorted(out)


class Storage:
    """A filesystem and a root path in it, with the operations the engine needs."""

    def __init__(self, fs: pafs.FileSystem, root: str) -> None:
        self.fs = fs
        self.root = root

    @classmethod
    def from_path(cls, path_or_uri: str, filesystem: Optional[pafs.FileSystem] = None
                  ) -> "Storage":
        fs, root = resolve(path_or_uri, filesystem)
        return cls(fs, root)

    @property
    def local(self) -> bool:
        return is_local(self.fs)

    @property
    def object_store(self) -> bool:
        """True for S3 and GCS: no directories, no rename."""
        return self.fs.type_name in _OBJECT_STORE_TYPES

    def display(self, path: Optional[str] = None) -> str:
        """``path`` (default: the root) as shown to users: a local path, or a URI with
        neither credentials nor endpoint (those stay inside the filesystem object)."""
        path = path or self.root
        if self.local:
            return path
        scheme = "s3" if self.fs.type_name == "s3" else self.fs.type_name
        return f"{scheme}://{path}"

    def __repr__(self) -> str:
        return f"Storage({self.display()!r})"

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        remember_filesystem(self.fs, self.root)

    # --- reads -----------------------------------------------------------------
    @_retrying
    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    @_retrying
    def is_dir(self, path: str) -> bool:
        return self.fs.get_file_info(path).type == pafs.FileType.Directory

    @_retrying
    def list_dir(self, path: str) -> List[str]:
        """Names directly under ``path`` (empty when it does not exist)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except FileNotFoundError:
            return []
        return sorted(info.base_name for info in infos)

    @_retrying
    def list_files(self, path: str) -> List[str]:
        """Relative paths of the files under ``path`` (recursive, sorted; empty when it
        does not exist)."""
        try:
            infos = self.fs.get_file_info(
                pafs.FileSelector(path, recursive=True, allow_not_found=True))
        except FileNotFoundError:
            return []
        prefix = path.rstrip("/") + "/"
        return sorted(info.path[len(prefix):] for info in infos
                      if info.type == pafs.FileType.File and info.path.startswith(prefix))

    @_retrying
    def read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_stream(path) as f:
            return f.read()

    def read_json(self, path: str) -> Optional[Dict[str, Any]]:
        if not self.exists(path):
            return None
        return json.loads(self.read_bytes(path).decode("utf-8"))

    # --- writes ----------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        if self.object_store:  # prefixes need no marker objects
            return
        self.fs.create_dir(path, recursive=True)

    @_retrying
    def write_bytes_atomic(self, path: str, data: bytes) -> None:
        """Write a file so that readers see the old or the new content, never a part."""
        if self.local:
            directory = os.path.dirname(path)
            os.makedirs(directory, exist_ok=True)
            tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_path(directory, directory=True)
        else:  # object stores make a PUT visible whole or not at all
            with self.fs.open_output_stream(path) as f:
                f.write(data)

    def write_json_atomic(self, path: str, obj: Any) -> None:
        self.write_bytes_atomic(path, json.dumps(obj, indent=1, default=str).encode("utf-8"))

    @_retrying
    def _put_file(self, local_path: str, dest: str) -> None:
        with open(local_path, "rb") as fin, self.fs.open_output_stream(dest) as fout:
            while True:
                chunk = fin.read(_COPY_CHUNK)
                if not chunk:
                    break
                fout.write(chunk)

    def upload_dir(self, local_dir: str, dest: str) -> List[str]:
        """Copy a local directory's files to ``dest`` (durably on local disk)."""
        files = list_files(local_dir)
        if self.local:
            made = set()
            for rel in files:
                target = os.path.join(dest, rel)
                parent = os.path.dirname(target)
                if parent not in made:
                    os.makedirs(parent, exist_ok=True)
                    made.add(parent)
                _copy_local_file_durable(os.path.join(local_dir, rel), target)
            for parent in made:
                _fsync_path(parent, directory=True)
        elif self.object_store:  # one PUT per file, a few in parallel, no dir markers
            jobs = [(os.path.join(local_dir, rel), join(dest, rel.replace(os.sep, "/")))
                    for rel in files]
            if len(jobs) <= 1:
                for src, dst in jobs:
                    self._put_file(src, dst)
            else:
                with ThreadPoolExecutor(min(_UPLOAD_THREADS, len(jobs))) as pool:
                    for fut in [pool.submit(self._put_file, src, dst) for src, dst in jobs]:
                        fut.result()
        else:
            self.makedirs(dest)
            pafs.copy_files(local_dir, dest, source_filesystem=pafs.LocalFileSystem(),
                            destination_filesystem=self.fs)
        return files

    @_retrying
    def download_dir(self, src: str, local_dir: str) -> None:
        os.makedirs(local_dir, exist_ok=True)
        if self.local:
            shutil.copytree(src, local_dir, dirs_exist_ok=True)
            return
        if not self.is_dir(src):
            raise FileNotFoundError(f"{self.display(src)} does not exist or is not a directory")
        pafs.copy_files(src, local_dir, source_filesystem=self.fs,
                        destination_filesystem=pafs.LocalFileSystem())

    def move(self, src: str, dst: str) -> None:
        """Move a file or a directory. Object stores have no rename: a directory moves
        file by file (server-side copy, then delete), so it is not atomic there; commit
        markers, not moves, make checkpoints visible."""
        if self.local:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.replace(src, dst)
        elif self.object_store and self.is_dir(src):
            for rel in self.list_files(src):
                self._move_file(join(src, rel), join(dst, rel))
            self.delete_dir(src)
        else:
            self._move_file(src, dst)

    @_retrying
    def _move_file(self, src: str, dst: str) -> None:
        try:
            self.fs.move(src, dst)
        except FileNotFoundError:
            # A retried move whose first try went through (the answer was lost).
            if self.fs.get_file_info(dst).type != pafs.FileType.File:
                raise

    @_retrying
    def delete_dir(self, path: str) -> None:
        """Delete a directory and everything under it (nothing if it does not exist).

        A checkpoint's commit marker goes first, so a deletion cut short leaves a
        directory that a resume treats as uncommitted, never a committed one with
        files missing (deletion order inside a directory is otherwise arbitrary)."""
        self._delete_commit_marker(path)
        try:
            self.fs.delete_dir(path)
        except (FileNotFoundError, OSError):
            if self.exists(path):
                raise

    @_retrying
    def _delete_commit_marker(self, path: str) -> None:
        marker = join(path, constants.COMMIT_MARKER)
        if self.local:
            try:
                os.remove(marker)
            except (FileNotFoundError, NotADirectoryError):
                return
            _fsync_path(path, directory=True)
            return
        try:
            if self.fs.get_file_info(marker).type == pafs.FileType.File:
                self.fs.delete_file(marker)
        except FileNotFoundError:
            pass

    def fsync_dir(self, path: str) -> None:
        if self.local:
            _fsync_path(path, directory=True)

    def check_writable(self) -> None:
        """Write and delete a probe file under the root, or raise StorageError with advice."""
        if self.object_store:
            self._check_bucket()
        probe = join(self.root, f".write_probe_{uuid.uuid4().hex}")
        try:
            self.makedirs(self.root)
            with self.fs.open_output_stream(probe) as f:
                f.write(b"ok")
            self.fs.delete_file(probe)
        except Exception as exc:
            raise StorageError(
                f"Cannot write to storage {self.display()!r} ({type(exc).__name__}: "
                f"{_safe_reason(exc)}). Set RunConfig(storage_path=...) or "
                f"${constants.STORAGE_PATH_ENV_VAR} to a writable directory or bucket."
            ) from None

    def _check_bucket(self) -> None:
        bucket = self.root.split("/", 1)[0]
        try:
            missing = self.fs.get_file_info(bucket).type == pafs.FileType.NotFound
        except Exception as exc:
            raise StorageError(
                f"Cannot reach the bucket of storage {self.display()!r} "
                f"({type(exc).__name__}: {_safe_reason(exc)}). Check the endpoint, the "
                "network and the credentials (for S3: AWS_ACCESS_KEY_ID / "
                "AWS_SECRET_ACCESS_KEY or an instance role)."
            ) from None
        if missing:
            raise StorageError(
                f"Storage {self.display()!r}: bucket {bucket!r} does not exist (or these "
                "credentials cannot see it). Create the bucket first, or set "
                f"RunConfig(storage_path=...) or ${constants.STORAGE_PATH_ENV_VAR} to an "
                "existing one."
            )


def _safe_reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    text = scrub(text)
    # Never echo credentials: some messages name the key material they rejected.
    for marker in ("secret_key", "secret_access_key", "session_token", "signature="):
        if marker in text.lower():
            return "see the storage server's logs"
    return text[:300]


def make_temp_dir(prefix: str = "trainyard_") -> str:
    return tempfile.mkdtemp(prefix=prefix)
