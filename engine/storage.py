"""Reading and writing trainyard's storage: the public API for code outside the engine.

``tasks/``, ``pipelines/``, ``flows/`` and ``dags/`` reach storage through this module
only (``engine._internal`` is the engine's own). A storage root is a local absolute path,
``memory://name`` (RAM-backed, this machine), ``s3://bucket/prefix`` (with
``?endpoint_override=host:port&scheme=http`` for S3-compatible servers) or ``gs://``.

    from engine.storage import Storage, default_root, join

    st = Storage.from_path(default_root())           # storage or $TRAINYARD_STORAGE_PATH
    staging = join(st.root, ".staging-1234")
    ...                                               # write files under staging
    st.commit_dir(staging, join(st.root, "datasets", "digits-ab12"), {"rows": 1797})
    st.read_commit_marker(join(st.root, "datasets", "digits-ab12"))  # -> {"rows": 1797}

Names:
    Storage: a filesystem and a root in it; atomic writes, moves, deletions, uploads,
        the atomic directory commit (``commit_dir``, ``write_commit_marker``,
        ``read_commit_marker``) and a compare-and-swap of a JSON file (``update_json``).
    resolve: ``(pyarrow filesystem, path inside it)`` for a path or URI.
    default_root: the storage root (an explicit one, ``$TRAINYARD_STORAGE_PATH``, or
        ``~/trainyard_results``).
    join: join paths inside a filesystem.
    is_uri: whether a string is a URI rather than a local path.
    redact / scrub: a URI / any text without credentials, fit for logs and references.
    StorageError: what bad storage settings raise, with the fix in the message.
"""

from __future__ import annotations

from engine._internal.storage.filesystem import Storage
from engine._internal.storage.paths import default_root, is_uri, join, resolve
from engine._internal.storage.uris import redact, scrub
from engine.exceptions import StorageError

__all__ = ["Storage", "StorageError", "default_root", "is_uri", "join", "redact",
           "resolve", "scrub"]
