"""Model aliases as files: a pointer per alias, and its history (the default registry).

    <registry>/<pipeline>/<alias>.json                    the pointer (atomic write)
    <registry>/<pipeline>/history/<alias>/<time>-<id>.json one file per decision

Each decision (promoted or rejected) is written first as its own history file (a new
name each time, so concurrent promoters never overwrite each other's entries); only a
promotion then replaces the pointer, atomically (rename on local disks, one PUT on
object stores). A reader sees the old pointer or the new one, never a mix. The pointer
is replaced only if it still names the champion the gate judged against: a
compare-and-swap under an ``flock`` on local disks, a PUT conditional on the ETag on S3
(``Storage.update_json``). A promotion that lost that race is kept in the history as
``superseded``, and ``promote`` decides again.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

from engine.storage import Storage, default_root, join, redact
from tasks import layout
from tasks.refs import CheckpointRef
from tasks.registry.base import AliasMovedError, Registry, check_unmoved

HISTORY_DIR = "history"


class FileRegistry(Registry):
    """Aliases as JSON pointer files under ``root`` (the default registry)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def current(self, pipeline: str, alias: str) -> Optional[CheckpointRef]:
        pointer = read_pointer(self.root, pipeline, alias)
        return None if pointer is None else CheckpointRef.from_dict(pointer["checkpoint"])

    def record(self, record: Dict[str, Any], context: Dict[str, Any]) -> Tuple[str, str]:
        """Write the decision's history entry, then (promoted) the pointer; returns
        ``(pointer URI, entry URI)``, redacted."""
        pipeline, alias = record["pipeline"], record["alias"]
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(record["decided_at"]))
        entry_uri = layout.sub(self.root, layout.clean_name(pipeline, "pipeline"),
                               HISTORY_DIR, alias, f"{stamp}-{uuid.uuid4().hex[:8]}.json")
        st = Storage.from_path(entry_uri)
        st.write_json_atomic(st.root, dict(record, context=context))
        pointer = pointer_uri(self.root, pipeline, alias)
        if record["decision"] == "promoted":
            pst = Storage.from_path(pointer)

            def moved(current: Optional[Dict[str, Any]]) -> Dict[str, Any]:
                check_unmoved(record, None if current is None
                              else current.get("checkpoint", {}).get("uri"))
                return dict(record, entry=redact(entry_uri))

            try:  # compare-and-swap: atomic against other promoters (flock / If-Match)
                pst.update_json(pst.root, moved)
            except AliasMovedError as exc:
                st.write_json_atomic(st.root, dict(
                    record, context=context, decision="superseded",
                    reasons=record["reasons"] + [str(exc)]))
                raise
        return redact(pointer), redact(entry_uri)

    def history(self, pipeline: str, alias: str) -> List[Dict[str, Any]]:
        return history(self.root, pipeline, alias)


def registry_root(registry: Optional[str], storage: Optional[str]) -> str:
    if registry:
        return default_root(registry)
    return layout.sub(default_root(storage), layout.MODELS_DIR)


def pointer_uri(root: str, pipeline: str, alias: str) -> str:
    return layout.sub(root, layout.clean_name(pipeline, "pipeline"), f"{alias}.json")


def read_pointer(root: str, pipeline: str, alias: str) -> Optional[Dict[str, Any]]:
    st = Storage.from_path(pointer_uri(root, pipeline, alias))
    return st.read_json(st.root)


def history(root: str, pipeline: str, alias: str) -> List[Dict[str, Any]]:
    """Every decision for an alias, oldest first."""
    directory = layout.sub(root, layout.clean_name(pipeline, "pipeline"), HISTORY_DIR, alias)
    st = Storage.from_path(directory)
    inner = st.root
    out = []
    for name in st.list_dir(inner):
        if name.endswith(".json") and not name.startswith("."):
            data = st.read_json(join(inner, name))
            if data is not None:
                out.append(data)
    return sorted(out, key=lambda d: d.get("decided_at", 0))
