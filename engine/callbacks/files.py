"""``result.json`` and ``progress.csv`` in each trial directory, and the file they grow in.

Both files hold one row per report. A round that is reported again (a retry or a resumed
run redoes the rounds after the latest checkpoint) replaces the rows from that
iteration on, so the files match ``Result.metrics_dataframe``: each iteration once.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import time
from typing import Any, Dict, List, Optional, Tuple

from engine import constants
from engine._internal.execution.trial import Trial
from engine._internal.storage.filesystem import Storage, join
from engine.callbacks.base import LoggerCallback

logger = logging.getLogger("engine")


class RunFile:
    """A growing text file in a trial directory, written through ``Storage``.

    Local disks: appended to and flushed at every write. Object stores have no append:
    the content is kept in memory and written whole by :meth:`flush` (at checkpoints, at
    the end, and at most every ``LOGGER_REMOTE_FLUSH_PERIOD_S`` on a write).
    """

    def __init__(self, storage: Storage, name: str) -> None:
        self.storage = storage
        self.path = join(storage.root, name)
        self._fh: Optional[io.TextIOBase] = None
        self._content: List[str] = []  # object stores: the whole file
        self._dirty = False
        self._last_flush = time.monotonic()

    def read_existing(self) -> str:
        """The file's current content ("" when it does not exist yet)."""
        if not self.storage.exists(self.path):
            return ""
        text = self.storage.read_bytes(self.path).decode("utf-8", errors="replace")
        if not self.storage.local:
            self._content = [text]
        return text

    def append(self, text: str) -> None:
        if self.storage.local:
            if self._fh is None:
                self.storage.makedirs(self.storage.root)
                self._fh = open(self.path, "a", encoding="utf-8")
            self._fh.write(text)
            self._fh.flush()
            return
        self._content.append(text)
        self._dirty = True
        if time.monotonic() - self._last_flush > constants.LOGGER_REMOTE_FLUSH_PERIOD_S:
            self.flush()

    def rewrite(self, text: str) -> None:
        """Replace the whole content (atomically on local disks)."""
        self._close_handle()
        if self.storage.local:
            self.storage.write_bytes_atomic(self.path, text.encode("utf-8"))
        else:
            self._content = [text]
            self._dirty = True

    def flush(self) -> None:
        if self.storage.local or not self._dirty:
            return
        whole = "".join(self._content)
        self._content = [whole]
        self.storage.write_bytes_atomic(self.path, whole.encode("utf-8"))
        self._dirty = False
        self._last_flush = time.monotonic()

    def close(self) -> None:
        self.flush()
        self._close_handle()

    def _close_handle(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def flatten(result: Dict[str, Any], sep: str = "/", skip: Tuple[str, ...] = ("config",)
            ) -> Dict[str, Any]:
    """Nested dicts flattened into ``"outer/inner"`` keys; keys in ``skip`` dropped."""
    out: Dict[str, Any] = {}

    def walk(value: Dict[str, Any], prefix: str) -> None:
        for key, item in value.items():
            if not prefix and key in skip:
                continue
            if isinstance(item, dict):
                walk(item, f"{prefix}{key}{sep}")
            else:
                out[f"{prefix}{key}"] = item

    walk(result, "")
    return out


def iteration_of(result: Dict[str, Any]) -> Optional[int]:
    value = result.get("training_iteration")
    try:
        return int(value) if value is not None and value != "" else None
    except (TypeError, ValueError):
        return None


class _TrialRows:
    """One trial's rows (iteration, payload), the file they are written to, and (CSV)
    its columns."""

    def __init__(self, file: RunFile) -> None:
        self.file = file
        self.rows: List[Tuple[Optional[int], Any]] = []
        self.columns: List[str] = []
        self.known: set = set()  # the columns, for fast lookups
        self.widened = False

    @property
    def payloads(self) -> List[Any]:
        return [row for _, row in self.rows]

    def redoes(self, iteration: Optional[int]) -> bool:
        """True when ``iteration`` was logged already (a retry or resume redoes it)."""
        last = self.rows[-1][0] if self.rows else None
        return iteration is not None and last is not None and iteration <= last

    def drop_from(self, iteration: int) -> None:
        self.rows = [r for r in self.rows if r[0] is None or r[0] < iteration]


class _RowFileLogger(LoggerCallback):
    """A file with one row per report, per trial; subclasses define the format."""

    file_name = ""

    def __init__(self) -> None:
        self._trials: Dict[str, _TrialRows] = {}

    # --- format ------------------------------------------------------------------
    def _parse(self, state: _TrialRows, text: str) -> List[Tuple[Optional[int], Any]]:
        raise NotImplementedError

    def _render(self, state: _TrialRows) -> str:
        raise NotImplementedError

    def _row(self, state: _TrialRows, result: Dict[str, Any]) -> Any:
        raise NotImplementedError

    def _append_text(self, state: _TrialRows, row: Any) -> Optional[str]:
        """Text that appends ``row``, or None when the whole file must be rewritten."""
        raise NotImplementedError

    # --- hooks -------------------------------------------------------------------
    def log_trial_start(self, trial: Trial) -> None:
        self._open(trial)

    def log_trial_result(self, iteration: int, trial: Trial, result: Dict[str, Any]) -> None:
        state = self._trials.get(trial.trial_id) or self._open(trial)
        it = iteration_of(result)
        row = self._row(state, result)
        redo = state.redoes(it)
        if redo:
            state.drop_from(it)  # type: ignore[arg-type]
        state.rows.append((it, row))
        text = None if redo else self._append_text(state, row)
        if text is None:
            state.file.rewrite(self._render(state))
        else:
            state.file.append(text)

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        state = self._trials.pop(trial.trial_id, None)
        if state is not None:
            state.file.close()

    def on_checkpoint(self, checkpoint: Any, metrics: Dict[str, Any]) -> None:
        for state in self._trials.values():
            state.file.flush()

    def _open(self, trial: Trial) -> _TrialRows:
        state = _TrialRows(RunFile(trial.get_storage(), self.file_name))
        existing = state.file.read_existing()
        if existing:  # a resumed run: keep its rows, rewrite any torn last line
            state.rows = self._parse(state, existing)
            state.file.rewrite(self._render(state))
        self._trials[trial.trial_id] = state
        return state


class JsonLoggerCallback(_RowFileLogger):
    """Writes ``result.json`` in the trial directory: one JSON object per line, rank 0's
    metrics of each report with the automatic fields (``config`` included); and the
    trial's config as ``params.json``. On by default."""

    file_name = constants.RESULT_JSON_FILE

    def log_trial_start(self, trial: Trial) -> None:
        super().log_trial_start(trial)
        storage = trial.get_storage()
        storage.write_bytes_atomic(
            join(storage.root, constants.PARAMS_JSON_FILE),
            json.dumps(trial.config or {}, indent=2, sort_keys=True, default=repr).encode())

    def _parse(self, state: _TrialRows, text: str) -> List[Tuple[Optional[int], Any]]:
        rows = []
        for line in text.splitlines():
            try:
                rows.append((iteration_of(json.loads(line)), line))
            except (ValueError, AttributeError):
                continue  # a line cut short by a crash
        return rows

    def _render(self, state: _TrialRows) -> str:
        return "".join(f"{line}\n" for line in state.payloads)

    def _row(self, state: _TrialRows, result: Dict[str, Any]) -> Any:
        return json.dumps(result, default=str)

    def _append_text(self, state: _TrialRows, row: Any) -> Optional[str]:
        return f"{row}\n"


class CSVLoggerCallback(_RowFileLogger):
    """Writes ``progress.csv`` in the trial directory: one row per report, nested
    metrics flattened to ``outer/inner`` columns, ``config`` left out (it is in
    ``params.json``). On by default.

    Columns are those of the first report, then each new key in the order it first
    appears: a report that brings a new key rewrites the file with the wider header, so
    every row stays aligned (earlier rows get an empty cell).
    """

    file_name = constants.PROGRESS_CSV_FILE

    def _parse(self, state: _TrialRows, text: str) -> List[Tuple[Optional[int], Any]]:
        reader = csv.DictReader(io.StringIO(text))
        state.columns = list(reader.fieldnames or [])
        # A torn last line has too many cells (key None) or too few (value None).
        return [(iteration_of(row), dict(row)) for row in reader
                if None not in row and None not in row.values()]

    def _render(self, state: _TrialRows) -> str:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=state.columns, restval="")
        writer.writeheader()
        writer.writerows(state.payloads)
        return buf.getvalue()

    def _row(self, state: _TrialRows, result: Dict[str, Any]) -> Any:
        row = {k: _cell(v) for k, v in flatten(result).items()}
        if len(state.columns) != len(state.known):
            state.known = set(state.columns)
        new = [k for k in row if k not in state.known]
        state.columns.extend(new)
        state.known.update(new)
        state.widened = bool(new)
        return row

    def _append_text(self, state: _TrialRows, row: Any) -> Optional[str]:
        if state.widened:
            return None  # a new header: rewrite the whole file
        buf = io.StringIO()
        csv.DictWriter(buf, fieldnames=state.columns, restval="").writerow(row)
        return buf.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return json.dumps(value, default=str)
    return value
