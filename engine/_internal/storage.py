"""The one place that talks to storage (pyarrow.fs): local paths, s3://, gs://.

Every write that must survive a crash is atomic: files are written (and fsynced on local
disks), then made visible by a rename or a marker written last.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

import pyarrow.fs as pafs

from engine import constants
from engine.exceptions import StorageError

_REMOTE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "abfs", "abfss")


def redact(uri: str) -> str:
    """Drop credentials and query parameters from a URI before it is logged or raised."""
    parts = urlsplit(uri)
    if not parts.scheme or parts.scheme == "file":
        return uri
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def is_uri(path: str) -> bool:
    return "://" in str(path)


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
            path_or_uri = (parts.netloc + parts.path).rstrip("/")
        return filesystem, path_or_uri
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
            "local absolute path, s3://, or gs://."
        )
    try:
        fs, path = pafs.FileSystem.from_uri(path_or_uri)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError with the raw URI
        raise StorageError(
            f"Cannot open storage {redact(path_or_uri)!r}: {type(exc).__name__}. Check the URI "
            "and credentials (for S3-compatible servers pass "
            "?endpoint_override=host:port&scheme=http)."
        ) from None
    return fs, path.rstrip("/")


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
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, length=8 * 1024 * 1024)
        fout.flush()
        os.fsync(fout.fileno())


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

    def display(self, path: Optional[str] = None) -> str:
        path = path or self.root
        if self.local:
            return path
        scheme = "s3" if self.fs.type_name == "s3" else self.fs.type_name
        return f"{scheme}://{path}"

    # --- reads -----------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def is_dir(self, path: str) -> bool:
        return self.fs.get_file_info(path).type == pafs.FileType.Directory

    def list_dir(self, path: str) -> List[str]:
        """Names directly under ``path`` (empty when it does not exist)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except FileNotFoundError:
            return []
        return sorted(info.base_name for info in infos)

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_stream(path) as f:
            return f.read()

    def read_json(self, path: str) -> Optional[Dict[str, Any]]:
        if not self.exists(path):
            return None
        return json.loads(self.read_bytes(path).decode("utf-8"))

    # --- writes ----------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

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
        else:
            self.makedirs(dest)
            pafs.copy_files(local_dir, dest, source_filesystem=pafs.LocalFileSystem(),
                            destination_filesystem=self.fs)
        return files

    def download_dir(self, src: str, local_dir: str) -> None:
        os.makedirs(local_dir, exist_ok=True)
        if self.local:
            shutil.copytree(src, local_dir, dirs_exist_ok=True)
        else:
            pafs.copy_files(src, local_dir, source_filesystem=self.fs,
                            destination_filesystem=pafs.LocalFileSystem())

    def move(self, src: str, dst: str) -> None:
        if self.local:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.replace(src, dst)
        else:
            self.fs.move(src, dst)

    def delete_dir(self, path: str) -> None:
        try:
            self.fs.delete_dir(path)
        except (FileNotFoundError, OSError):
            if self.exists(path):
                raise

    def fsync_dir(self, path: str) -> None:
        if self.local:
            _fsync_path(path, directory=True)

    def check_writable(self) -> None:
        """Write and delete a probe file under the root, or raise StorageError with advice."""
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


def _safe_reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    # Never echo credentials: pyarrow messages can include the request URI.
    for marker in ("access_key", "secret", "session_token", "AWS"):
        if marker.lower() in text.lower():
            return "see the storage server's logs"
    return text[:300]


def make_temp_dir(prefix: str = "trainyard_") -> str:
    return tempfile.mkdtemp(prefix=prefix)
