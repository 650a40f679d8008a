"""The layout pipeline tasks keep under the storage root (``engine.storage.default_root``),
and the path and name helpers every package of ``tasks`` uses to build it.

    <storage>/datasets/<name>-<fingerprint>/          ingest outputs (Parquet + commit marker)
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
from urllib.parse import urlsplit, urlunsplit

from engine.exceptions import ConfigError
from engine.storage import is_uri

DATASETS_DIR = "datasets"
RUNS_DIR = "runs"
MODELS_DIR = "models"
PREDICTIONS_DIR = "predictions"
REPORTS_DIR = "reports"

_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")

def sub(base: str, *parts: str) -> str:
    """``base/part/...`` for a local path or a URI, keeping a URI's query at the end."""
    parts = tuple(p.strip("/") for p in parts if p)
    if not is_uri(base) or base.startswith("file://"):
        return os.path.join(base, *parts)
    u = urlsplit(base)
    path = "/".join([u.path.rstrip("/"), *parts])
    return urlunsplit((u.scheme, u.netloc, path, u.query, u.fragment))


def clean_name(name: str, what: str = "name") -> str:
    """``name`` reduced to letters, digits, ``.``, ``_`` and ``-`` (safe in paths, keys and
    Prefect artifact keys once lower-cased)."""
    out = _NAME_RE.sub("-", str(name)).strip("-.")
    if not out:
        raise ConfigError(f"{what} {name!r} has no usable characters: use letters, digits, "
                          "'.', '_' or '-'.")
    return out
