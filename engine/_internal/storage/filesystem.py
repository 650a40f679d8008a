"""The one place that talks to storage (pyarrow.fs): local paths, s3://, gs://, memory://.

Every write that must survive a crash is atomic: files are written (and fsynced on local
disks), then made visible by a rename or a marker written last (``storage.commit``).

Object stores (S3, GCS) have no directories and no rename: files are written with one
PUT each (no directory-marker objects), "moving" is a server-side copy and delete per
file, and deleting a committed directory removes its commit marker first, so a
half-deleted checkpoint never looks committed.

The public face of this module is ``engine.storage``; the parts live beside it:
``storage.paths`` (paths and URIs to filesystems, the storage root), ``storage.retry``
(which errors are retried), ``storage.commit`` (the atomic directory commit),
``storage.s3`` (whole reads and conditional writes on S3 through boto3) and ``uris``
(secrets kept out of logs). Their names are importable from here too, as before.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, TypeVar

from engine import constants
from engine._internal.storage import commit as _commit
from engine._internal.storage import s3 as _s3
from engine._internal.storage.paths import (MEMORY_ROOT_ENV_VAR, OBJECT_STORE_TYPES,
                                            default_root, is_uri, join,
                                            memory_storage_path, memory_storage_root,
                                            pafs, remember_filesystem, resolve)
from engine._internal.storage.retry import (DEFAULT_RETRY_S, RETRY_ENV_VAR, is_transient,
                                            retrying, service_error)
from engine._internal.storage.uris import redact, safe_reason, scrub
from engine.exceptions import StorageError

__all__ = [
    "DEFAULT_RETRY_S", "MEMORY_ROOT_ENV_VAR", "RETRY_ENV_VAR", "Storage", "default_root",
    "is_local", "is_transient", "is_uri", "join", "list_files", "make_temp_dir",
    "memory_storage_path", "memory_storage_root", "redact", "remember_filesystem",
    "resolve", "scrub", "service_error",
]

_UPLOAD_THREADS = 8
# Reads of an object store file that a writer replaced meanwhile, before giving up.
_WHOLE_READ_ATTEMPTS = 8
_warned_no_sdk: List[bool] = []  # the pyarrow-only read is warned of once a process
_warned_no_cas: List[bool] = []  # and the unchecked read-modify-write
_COPY_CHUNK = 8 * 1024 * 1024
logger = logging.getLogger("engine")
_F = TypeVar("_F", bound=Callable[..., Any])


def _writes(method: _F) -> _F:
    """A write: the storage's fence (:meth:`Storage.fence_with`) is checked first. Put
    under ``@retrying``, so that every attempt of a retried write checks it again: a
    write retried for longer than a run's lease never lands after another driver took
    the run over."""

    @functools.wraps(method)
    def wrapper(self: "Storage", *args: Any, **kwargs: Any) -> Any:
        self._check_fence()
        return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def is_local(fs: pafs.FileSystem) -> bool:
    return isinstance(fs, pafs.LocalFileSystem)


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
    """A pyarrow filesystem and a root path in it, with the operations the engine and
    the pipeline tasks need: reads, atomic writes, uploads, moves, deletions and the
    atomic directory commit.

    Paths given to the methods are paths inside ``fs`` (``join(st.root, ...)``), not
    URIs. Operations on remote storage retry transient errors (see ``storage.retry``).

    Example:
        >>> st = Storage.from_path("s3://bucket/runs?endpoint_override=host:9000")
        >>> st.write_json_atomic(join(st.root, "state.json"), {"ok": True})
    """

    def __init__(self, fs: pafs.FileSystem, root: str) -> None:
        self.fs = fs
        self.root = root

    @classmethod
    def from_path(cls, path_or_uri: str, filesystem: Optional[pafs.FileSystem] = None
                  ) -> "Storage":
        """A Storage rooted at a local path or URI (see :func:`resolve`).

        Raises:
            StorageError: a relative local path or an unsupported URI.
        """
        fs, root = resolve(path_or_uri, filesystem)
        return cls(fs, root)

    @property
    def local(self) -> bool:
        return is_local(self.fs)

    @property
    def object_store(self) -> bool:
        """True for S3 and GCS: no directories, no rename."""
        return self.fs.type_name in OBJECT_STORE_TYPES

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

    def __getstate__(self) -> Dict[str, Any]:
        # The fence is the driver's (its lease): a copy on a worker writes unfenced, to
        # the run's staging area only.
        return {k: v for k, v in self.__dict__.items() if k not in ("_fence", "_etags")}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        remember_filesystem(self.fs, self.root)

    def _check_fence(self) -> None:
        fence = self.__dict__.get("_fence")
        if fence is not None:
            fence()

    def fence_with(self, check: Optional[Callable[[], None]]) -> None:
        """Call ``check`` before every write through this object (None: no fence). A
        run's driver fences its run directory with its lease's check, which raises
        ``RunOwnershipLostError`` once another driver owns the run, so nothing more of
        this driver lands there. Not pickled: workers' copies are not fenced."""
        if check is None:
            self.__dict__.pop("_fence", None)
        else:
            self.__dict__["_fence"] = check

    # --- reads -----------------------------------------------------------------
    @retrying
    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    @retrying
    def is_dir(self, path: str) -> bool:
        return self.fs.get_file_info(path).type == pafs.FileType.Directory

    @retrying
    def list_dir(self, path: str) -> List[str]:
        """Names directly under ``path`` (empty when it does not exist)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except FileNotFoundError:
            return []
        return sorted(info.base_name for info in infos)

    @retrying
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

    @retrying
    def read_bytes(self, path: str) -> bytes:
        """The file's bytes: on an object store, one version of it, whole.

        On S3 that is one GET through boto3 (``storage.s3``): pyarrow's reads take the
        object's size first and then fetch that many bytes with ranged GETs, so a read
        that overlaps a replace (a run record its driver rewrites while another process
        reads it) would get the new version cut at the old length. Without boto3, and
        on other object stores, a read whose length differs from the size before or
        after it is taken again (which a replace back to the same size can still slip
        past: install ``trainyard[s3]``)."""
        if self.local:
            with self.fs.open_input_stream(path) as f:
                return f.read()
        client = self._sdk_client()
        if client is not None:
            return _s3.read_whole(client, path, self.display(path))
        for attempt in range(_WHOLE_READ_ATTEMPTS):
            with self.fs.open_input_file(path) as f:
                size = f.size()
                data = f.read()
            if len(data) == size == self.fs.get_file_info(path).size:
                return data
            time.sleep(0.01 * attempt)  # the writer is mid-replace: let it finish
        raise StorageError(
            f"{self.display(path)} was replaced during each of {_WHOLE_READ_ATTEMPTS} "
            "reads of it, so no read got one version whole. Something rewrites it "
            "without pause: stop that writer (another driver of the same run?) and read "
            "it again.")

    def _sdk_client(self) -> Any:
        """boto3's client for this S3 filesystem, or None (not S3, no boto3, or options
        it is not given: see ``storage.s3``)."""
        if self.fs.type_name != "s3" or not isinstance(self.fs, pafs.S3FileSystem):
            return None  # (a stand-in filesystem in tests may call itself s3)
        try:
            return _s3.client_for(self.fs)
        except (ImportError, NotImplementedError) as exc:
            if not _warned_no_sdk:
                _warned_no_sdk.append(True)
                logger.warning(
                    "Reading S3 through pyarrow only (%s): a read that overlaps a replace "
                    "of the same object is retried, not prevented. pip install "
                    "'trainyard[s3]' for whole reads.", safe_reason(exc) or "no boto3")
            return None

    def read_json(self, path: str) -> Optional[Dict[str, Any]]:
        """The parsed file, or None when there is none (no separate existence check: on
        an object store that would be one more request before the read's own)."""
        try:
            data = self.read_bytes(path)
        except FileNotFoundError:
            return None
        return json.loads(data.decode("utf-8"))

    # --- writes ----------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        if self.object_store:  # prefixes need no marker objects
            return
        self.fs.create_dir(path, recursive=True)

    @retrying
    @_writes
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
            try:
                self._check_fence()  # again, just before the write becomes visible
            except BaseException:
                os.unlink(tmp)
                raise
            os.replace(tmp, path)
            _fsync_path(directory, directory=True)
        elif self.__dict__.get("_fence") is not None and self._sdk_client() is not None:
            self._put_unless_changed(path, data)
        else:  # object stores make a PUT visible whole or not at all
            with self.fs.open_output_stream(path) as f:
                f.write(data)

    def _put_unless_changed(self, path: str, data: bytes) -> None:
        """A fenced S3 write: a conditional PUT against the ETag this object last wrote
        (or read with HEAD) there. A refusal means another writer replaced the object:
        the fence then finds the run taken over (RunOwnershipLostError); if this driver
        still owns the run, the other writer is one that lost it, whose late PUT this
        one replaces."""
        client, shown = self._sdk_client(), self.display(path)
        etags = self.__dict__.setdefault("_etags", {})
        for _attempt in range(3):
            if path not in etags:
                etags[path] = _s3.etag_of(client, path, shown)
            new = _s3.put_if_unchanged(client, path, data, shown, etags[path])
            if new is not None:
                etags[path] = new
                return
            current = _s3.etag_of(client, path, shown)
            if _s3.holds(current, data):
                etags[path] = current  # a retried PUT whose first try went through
                return
            etags.pop(path, None)
            self._check_fence()
        raise StorageError(
            f"{shown} keeps being replaced by another writer while this driver owns the "
            "run: stop the other process writing into this run directory.")

    def write_json_atomic(self, path: str, obj: Any) -> None:
        self.write_bytes_atomic(path, json.dumps(obj, indent=1, default=str).encode("utf-8"))

    def update_json(self, path: str, change: Callable[[Optional[Any]], Any],
                    attempts: int = 5) -> Any:
        """Read-modify-write of a JSON file, atomic against other writers of it.

        ``change(current)`` gets the parsed file (None when there is none) and returns
        what to write, or raises to write nothing (its exception propagates). The
        result is written only if the file is still what ``change`` saw: on a local
        disk the read and the write hold an exclusive ``flock`` on a lock file beside
        it (released by the kernel if the process dies); on S3 the write is a PUT
        conditional on the ETag the read returned (``If-Match``, or ``If-None-Match``
        for a new file), and a refused PUT reads again and calls ``change`` again.
        Returns what was written. Other object stores, and S3 without boto3, read then
        write without that check (warned of once)."""
        if self.local:
            return self._update_local(path, change)
        client = self._sdk_client()
        if client is None:
            if not _warned_no_cas:
                _warned_no_cas.append(True)
                logger.warning("%s cannot write conditionally (S3 through boto3 can: pip "
                               "install 'trainyard[s3]'): read-modify-writes of it are "
                               "not checked against concurrent writers.", self.display())
            new = change(self.read_json(path))
            self.write_json_atomic(path, new)
            return new
        shown = self.display(path)
        for _attempt in range(attempts):
            data, etag = self._read_with_etag(client, path, shown)
            new = change(None if data is None else json.loads(data.decode("utf-8")))
            encoded = json.dumps(new, indent=1, default=str).encode("utf-8")
            if self._put_if_unchanged(client, path, encoded, shown, etag):
                return new
        raise StorageError(
            f"{shown} was replaced by another writer during each of {attempts} updates "
            "of it: something rewrites it without pause; stop it and try again.")

    @retrying
    def _read_with_etag(self, client: Any, path: str, shown: str) -> Any:
        return _s3.read_with_etag(client, path, shown)

    @retrying
    @_writes
    def _put_if_unchanged(self, client: Any, path: str, data: bytes, shown: str,
                          etag: Optional[str]) -> bool:
        if _s3.put_if_unchanged(client, path, data, shown, etag) is not None:
            return True
        # Refused: another writer's change, or this PUT's own earlier try that went
        # through before its answer was lost (the retry then finds its own bytes).
        _now, current = _s3.read_with_etag(client, path, shown)
        return _s3.holds(current, data)

    @_writes
    def _update_local(self, path: str, change: Callable[[Optional[Any]], Any]) -> Any:
        import fcntl

        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        lock = os.path.join(directory, f".{os.path.basename(path)}.lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            new = change(self.read_json(path))
            self.write_json_atomic(path, new)
            return new
        finally:
            os.close(fd)  # releases the lock

    @retrying
    @_writes
    def _put_file(self, local_path: str, dest: str) -> None:
        with open(local_path, "rb") as fin, self.fs.open_output_stream(dest) as fout:
            while True:
                chunk = fin.read(_COPY_CHUNK)
                if not chunk:
                    break
                fout.write(chunk)

    @_writes
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

    @retrying
    def download_dir(self, src: str, local_dir: str) -> None:
        os.makedirs(local_dir, exist_ok=True)
        if self.local:
            shutil.copytree(src, local_dir, dirs_exist_ok=True)
            return
        if not self.is_dir(src):
            raise FileNotFoundError(f"{self.display(src)} does not exist or is not a directory")
        pafs.copy_files(src, local_dir, source_filesystem=self.fs,
                        destination_filesystem=pafs.LocalFileSystem())

    @_writes
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

    @retrying
    @_writes
    def _move_file(self, src: str, dst: str) -> None:
        try:
            self.fs.move(src, dst)
        except FileNotFoundError:
            # A retried move whose first try went through (the answer was lost).
            if self.fs.get_file_info(dst).type != pafs.FileType.File:
                raise

    @retrying
    @_writes
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

    @retrying
    @_writes
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

    # --- the atomic directory commit (storage.commit) ----------------------------
    @_writes
    def commit_dir(self, staging: str, dest: str, marker: Dict[str, Any],
                   replace: bool = False) -> Dict[str, Any]:
        """Make the staged directory ``staging`` the committed directory ``dest``: its
        files and ``marker`` (JSON, in ``constants.COMMIT_MARKER``) appear together, or
        ``dest`` does not read as committed. One rename on a local disk; on an object
        store the files are moved and the marker is written last.

        Args:
            staging: A directory of this storage holding the files to publish.
            dest: Where they go (on the same storage).
            marker: What the commit records (index, metrics, a data set reference…).
            replace: Replace a copy already committed at ``dest``; by default that copy
                is kept and ``staging`` deleted (content-addressed names: the same
                name holds the same content). Uncommitted debris is replaced either way.

        Returns:
            The marker now at ``dest``: ``marker``, or the kept copy's.
        """
        return _commit.commit_dir(self, staging, dest, marker, replace)

    def write_commit_marker(self, dest: str, marker: Dict[str, Any]) -> None:
        """Commit ``dest`` as it is now: write its marker atomically (last)."""
        _commit.write_commit_marker(self, dest, marker)

    def read_commit_marker(self, dest: str) -> Optional[Dict[str, Any]]:
        """The commit marker of ``dest``, or None when ``dest`` is not committed."""
        return _commit.read_commit_marker(self, dest)

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
                f"{safe_reason(exc)}). Set RunConfig(storage_path=...) or "
                f"${constants.STORAGE_PATH_ENV_VAR} to a writable directory or bucket."
            ) from None

    def _check_bucket(self) -> None:
        bucket = self.root.split("/", 1)[0]
        try:
            missing = self.fs.get_file_info(bucket).type == pafs.FileType.NotFound
        except Exception as exc:
            raise StorageError(
                f"Cannot reach the bucket of storage {self.display()!r} "
                f"({type(exc).__name__}: {safe_reason(exc)}). Check the endpoint, the "
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


def make_temp_dir(prefix: str = "trainyard_") -> str:
    return tempfile.mkdtemp(prefix=prefix)
