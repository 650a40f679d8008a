"""Where the Prefect tasks persist their results: under the run's storage root
(``<storage>/prefect-results``), so a worker on another machine reads an upstream task's
result. Importing this module registers the :class:`StorageRootResults` block type.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from prefect.filesystems import WritableFileSystem
from pydantic import Field, PrivateAttr


#: Where under the storage root the Prefect tasks persist their results.
RESULTS_DIR = "prefect-results"


def result_storage_for(storage: str) -> Any:
    """The ``result_storage`` of a flow run's tasks: ``<storage>/prefect-results``, so a
    worker on another machine reads an upstream task's result (a retried flow run,
    ``state.result()`` from a client).

    Args:
        storage: The run's storage root: a local path (that the workers share: NFS, a
            volume) or an object-store URI (``s3://bucket/prefix``, with its
            ``?endpoint_override=...``).

    Returns:
        A saved block named ``trainyard-results-<hash of the directory>`` (a result
        records the block's id, which any reader loads; an unsaved one would be read
        through the reader's own default store): Prefect's ``LocalFileSystem`` for a
        local root, :class:`StorageRootResults` for an object store.
    """
    import hashlib

    from prefect.filesystems import LocalFileSystem

    from engine.storage import is_uri
    from tasks.layout import sub

    if is_uri(storage) and not storage.startswith("file://"):
        block: Any = StorageRootResults.for_uri(sub(storage, RESULTS_DIR))
    else:
        local = storage[len("file://"):] if storage.startswith("file://") else storage
        block = LocalFileSystem(basepath=sub(local, RESULTS_DIR))
    name = hashlib.sha256(block.basepath.encode()).hexdigest()[:16]
    block.save(f"trainyard-results-{name}", overwrite=True)
    return block


class StorageRootResults(WritableFileSystem):
    """Prefect result storage in an object store, through ``engine.storage`` (the same
    filesystem code as the runs and data sets).

    The saved ``basepath`` keeps the URI's ``?endpoint_override=...`` but never its
    credentials: every process that reads or writes takes them from its environment
    (``AWS_ACCESS_KEY_ID`` ...), as the rest of trainyard does. A process that reads
    these results imports ``tasks.prefect`` (the flows do), which makes the block
    type known to Prefect.
    """

    _block_type_name = "Trainyard Storage Results"
    _uri: Optional[str] = PrivateAttr(default=None)  # with credentials: this process only

    basepath: str = Field(description="Directory URI (s3://bucket/prefix/prefect-results)")

    @classmethod
    def for_uri(cls, uri: str) -> "StorageRootResults":
        """The block for ``uri``; credentials in it are used here, not saved."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(uri)
        block = cls(basepath=urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])))
        block._uri = uri
        return block

    def _path(self, path: str) -> tuple:
        from engine.storage import Storage, join

        st = Storage.from_path(self._uri or self.basepath)
        return st, join(st.root, path)

    # Sync methods (Prefect calls them so, with ``_sync=True`` from its sync code paths).
    def read_path(self, path: str, **_: Any) -> bytes:  # type: ignore[override]
        st, full = self._path(path)
        return st.read_bytes(full)

    def write_path(self, path: str, content: bytes, **_: Any) -> str:  # type: ignore[override]
        st, full = self._path(path)
        st.write_bytes_atomic(full, content)
        return path


def task_options(retries: int, retry_delay_s: float, storage: str) -> Dict[str, Any]:
    """``with_options`` of a flow's tasks: its retries, and results persisted under its
    storage root (:func:`result_storage_for`)."""
    out: Dict[str, Any] = dict(retries=retries, retry_delay_seconds=retry_delay_s)
    results = result_storage_for(storage)
    if results is not None:
        out["result_storage"] = results
    return out
