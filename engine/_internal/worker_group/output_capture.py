"""``RunConfig(log_to_file=...)``: a worker's stdout and stderr, also written to files in
the run directory (what Python code prints; the console still gets everything).

On local storage each write goes straight to the file (flushed, so a killed worker loses
nothing it printed); on remote storage the output is kept in a local file and appended
to the stored one when ``train_func`` ends.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Optional, Tuple

from engine._internal.storage.filesystem import Storage, join


@dataclass
class OutputFiles:
    """Where one rank's output goes: ``names`` in ``storage.root`` (``.rank<r>`` added
    for ranks above 0)."""

    storage: Storage
    names: Tuple[str, str]
    rank: int = 0

    def file_names(self) -> Tuple[str, str]:
        suffix = f".rank{self.rank}" if self.rank else ""
        return tuple(f"{n}{suffix}" for n in self.names)  # type: ignore[return-value]


class _Tee(io.TextIOBase):
    """Writes to the original stream and to a file; anything else goes to the stream."""

    def __init__(self, stream: Any, file: Any) -> None:
        self._stream = stream
        self._file = file

    def write(self, text: str) -> int:
        self._stream.write(text)
        try:
            self._file.write(text)
            self._file.flush()
        except ValueError:  # the file was closed after capture ended (a late thread)
            pass
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def capture(files: Optional[OutputFiles]) -> Iterator[None]:
    """Tee ``sys.stdout``/``sys.stderr`` into ``files`` while the block runs."""
    if files is None:
        yield
        return
    storage = files.storage
    names = files.file_names()
    local_dir = storage.root if storage.local else tempfile.mkdtemp(prefix="trainyard_log_")
    os.makedirs(local_dir, exist_ok=True)
    opened: Dict[str, Any] = {}
    for name in set(names):
        opened[name] = open(os.path.join(local_dir, name), "a", encoding="utf-8",
                            errors="replace")
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tee(old[0], opened[names[0]]), _Tee(old[1], opened[names[1]])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = old
        for f in opened.values():
            f.close()
        if not storage.local:
            _append_remote(storage, local_dir, list(opened))


def _append_remote(storage: Storage, local_dir: str, names: list) -> None:
    for name in names:
        path = join(storage.root, name)
        with open(os.path.join(local_dir, name), "rb") as f:
            new = f.read()
        old = storage.read_bytes(path) if storage.exists(path) else b""
        storage.write_bytes_atomic(path, old + new)
