"""The atomic directory commit: a staged directory becomes visible at its destination
whole, with its commit marker (``constants.COMMIT_MARKER``), or not at all.

A directory counts as committed exactly when its marker is there. The marker is a JSON
object written atomically (write then rename on a local disk, one PUT on an object
store), so a reader finds a whole marker or none, and the marker is always the last
thing to appear:

* On a local disk the marker is written into the staging directory, which one rename
  then moves into place: the data and the marker appear in the same instant, and of two
  writers racing for the same destination one wins the rename and the other finds the
  winner's copy already committed (never a directory about to be, which it could take
  for debris and delete).
* On an object store (no rename) the files are moved one by one, server side, and the
  marker is written after the last of them. Files already at the destination are
  overwritten in place, not deleted first, so racing writers of the same content (a data
  set named by its fingerprint) never delete each other's files.

Deleting a directory removes its marker first (``Storage.delete_dir``), so a deletion
cut short leaves an uncommitted directory, never a committed one with files missing.
"""

from __future__ import annotations

import errno
import json
import os
from typing import Any, Dict, Optional, Protocol

from engine import constants
from engine._internal.storage.paths import join


class CommitStore(Protocol):
    """What a commit uses of ``engine._internal.storage.filesystem.Storage``, which
    imports this module (so this one names it by its shape: no import cycle)."""

    @property
    def local(self) -> bool: ...

    def read_bytes(self, path: str) -> bytes: ...

    def write_json_atomic(self, path: str, obj: Any) -> None: ...

    def move(self, src: str, dst: str) -> None: ...

    def delete_dir(self, path: str) -> None: ...

    def _delete_commit_marker(self, path: str) -> None: ...

    def fsync_dir(self, path: str) -> None: ...

# A rename onto a directory that is not empty fails with one of these.
_DEST_TAKEN = (errno.ENOTEMPTY, errno.EEXIST)


def read_commit_marker(st: CommitStore, directory: str) -> Optional[Dict[str, Any]]:
    """The commit marker of ``directory``, or None when it is not committed."""
    try:
        data = st.read_bytes(join(directory, constants.COMMIT_MARKER))
    except (FileNotFoundError, NotADirectoryError):
        return None
    return json.loads(data.decode("utf-8"))


def write_commit_marker(st: CommitStore, directory: str, marker: Dict[str, Any]) -> None:
    """Commit ``directory`` as it is now, by writing its marker atomically."""
    st.write_json_atomic(join(directory, constants.COMMIT_MARKER), marker)


def commit_dir(st: CommitStore, staging: str, dest: str, marker: Dict[str, Any],
               replace: bool = False) -> Dict[str, Any]:
    """Make the staged directory ``staging`` the committed directory ``dest``.

    Returns the marker now at ``dest``: ``marker``, or the marker of a copy already
    committed there when ``replace`` is False (``staging`` is then deleted). Uncommitted
    debris at ``dest`` (a commit or a deletion cut short) never survives a local commit.
    """
    existing = read_commit_marker(st, dest)
    if existing is not None and not replace:
        st.delete_dir(staging)
        return existing
    if not st.local:
        if existing is not None:
            st.delete_dir(dest)  # marker first: from here on it reads as uncommitted
        # A marker staged along (a copy of a committed directory) would commit ``dest``
        # as soon as it was moved, before the other files: only the new one, last.
        st._delete_commit_marker(staging)
        st.move(staging, dest)
        write_commit_marker(st, dest, marker)
        return marker
    write_commit_marker(st, staging, marker)
    return _rename_into_place(st, staging, dest, marker, replace)


def _rename_into_place(st: CommitStore, staging: str, dest: str, marker: Dict[str, Any],
                       replace: bool) -> Dict[str, Any]:
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    try:
        os.rename(staging, dest)  # an empty directory at dest is replaced, others not
    except OSError as exc:
        if exc.errno not in _DEST_TAKEN:
            raise
        winner = read_commit_marker(st, dest)
        if winner is not None and not replace:  # another writer got there first
            st.delete_dir(staging)
            return winner
        st.delete_dir(dest)  # debris, or the copy being replaced
        os.rename(staging, dest)
    st.fsync_dir(parent)
    return marker
