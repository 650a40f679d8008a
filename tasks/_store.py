"""Where pipeline tasks keep things: one storage root (local path or URI) and its layout.

    <storage>/datasets/<name>-<fingerprint>/          ingest outputs (Parquet + manifest)
    <storage>/datasets/<...>-split-<seed>-<size>/     split outputs (train/, validation/)
    <storage>/runs/<run name>/                        engine runs and tune experiments
    <storage>/models/<pipeline>/<alias>.json          alias pointers (promote)
    <storage>/models/<pipeline>/history/<alias>/      one JSON per promotion decision
    <storage>/predictions/<...>/                      batch_predict outputs
    <storage>/reports/<pipeline>-<run id>/            run reports (report.md + PNGs)

An S3 root may carry ``?endpoint_override=host:port&scheme=http``; sub-paths keep that
query, while URIs put into references are shown without it (and without credentials).
"""

from __future__ import annotations

import os
import re
from typing import Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

from engine import constants
from engine._internal import storage as _storage
from engine.exceptions import ConfigError

DATASETS_DIR = "datasets"
RUNS_DIR = "runs"
MODELS_DIR = "models"
PREDICTIONS_DIR = "predictions"
REPORTS_DIR = "reports"

_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")


def storage_root(storage: Optional[str] = None) -> str:
    """``storage``, else ``$TRAINYARD_STORAGE_PATH``, else ``~/trainyard_results``; a local
    path comes back absolute (``~`` expanded).

    Raises:
        StorageError: a relative local path (workers elsewhere would not find it).
    """
    root = os.fspath(storage) if storage else os.environ.get(
        constants.STORAGE_PATH_ENV_VAR) or constants.DEFAULT_STORAGE_PATH
    if _storage.is_uri(root) and not root.startswith("file://"):
        return root
    root = os.path.expanduser(root[len("file://"):] if root.startswith("file://") else root)
    _storage.resolve(root)  # raises StorageError with advice for a relative path
    return os.path.normpath(root)


def sub(base: str, *parts: str) -> str:
    """``base/part/...`` for a local path or a URI, keeping a URI's query at the end."""
    parts = tuple(p.strip("/") for p in parts if p)
    if not _storage.is_uri(base) or base.startswith("file://"):
        return os.path.join(base, *parts)
    u = urlsplit(base)
    path = "/".join([u.path.rstrip("/"), *parts])
    return urlunsplit((u.scheme, u.netloc, path, u.query, u.fragment))


def open_dir(uri: str) -> Tuple[_storage.Storage, str]:
    """``(Storage rooted at uri, the path inside its filesystem)``."""
    fs, inner = _storage.resolve(uri)
    return _storage.Storage(fs, inner), inner


def display(uri: str) -> str:
    """A URI as references and logs show it: no credentials, no query."""
    return _storage.redact(uri) if _storage.is_uri(uri) else uri


def clean_name(name: str, what: str = "name") -> str:
    """``name`` reduced to letters, digits, ``.``, ``_`` and ``-`` (safe in paths, keys and
    Prefect artifact keys once lower-cased)."""
    out = _NAME_RE.sub("-", str(name)).strip("-.")
    if not out:
        raise ConfigError(f"{what} {name!r} has no usable characters: use letters, digits, "
                          "'.', '_' or '-'.")
    return out
