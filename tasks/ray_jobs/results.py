"""What crosses between a step's job and its submitter besides storage: the result
encoded as JSON, the error reported on the job's last log line, and the log tail.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

from engine import storage as _storage
from engine.exceptions import ConfigError
from tasks.ray_jobs.settings import ERROR_LINE_PREFIX, JobFailedError, RESULT_LINE_PREFIX

logger = logging.getLogger("tasks.jobs")


def decode_result(payload: Dict[str, Any]) -> Any:
    from tasks.refs import CheckpointRef, DatasetRef, TuneRef

    types = {"CheckpointRef": CheckpointRef, "TuneRef": TuneRef, "DatasetRef": DatasetRef}
    kind, value = payload.get("type"), payload.get("value")
    return types[kind].from_dict(value) if kind in types else value


def encode_result(value: Any, submission_id: str) -> Dict[str, Any]:
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return {"type": type(value).__name__, "value": to_dict(),
                "submission_id": submission_id}
    return {"type": "json", "value": value, "submission_id": submission_id}


def job_error(submission_id: str, status: str, error_type: Optional[str],
              logs: str) -> BaseException:
    """The error a task raises for a job that did not succeed: the job entry's own
    (its last ``trainyard-job-error:`` line) when it printed one, so that configuration
    errors stay non-retryable; else :class:`JobFailedError` with the log's tail."""
    reported = None if status == "STOPPED" else _reported_error(logs)
    if reported is not None:
        kind, message = reported
        return _error_class(kind)(f"Ray job {submission_id}: {message}")
    tail = "\n".join(_storage.scrub(logs).strip().splitlines()[-15:])
    if error_type == "RUNTIME_ENV_SETUP_FAILURE":
        return ConfigError(f"Ray job {submission_id}: its runtime_env could not be set up; "
                           f"fix run['runtime_env'] (or runtime_env=...):\n{tail}")
    verb = "was stopped" if status == "STOPPED" else "failed"
    return JobFailedError(f"Ray job {submission_id} {verb}; a retry of the task resubmits "
                          f"it and resumes from the latest checkpoint. Its log ends:\n{tail}")


def _reported_error(logs: str) -> Optional[Tuple[str, str]]:
    for line in reversed(logs.splitlines()):
        if line.startswith(ERROR_LINE_PREFIX):
            try:
                data = json.loads(line[len(ERROR_LINE_PREFIX):])
                return str(data["type"]), _storage.scrub(str(data["message"]))
            except (ValueError, KeyError):
                return None
    return None


def _error_class(kind: str) -> type:
    from engine import exceptions
    from pipelines import UnknownPipelineError
    from tasks.refs import RefError

    known = {c.__name__: c for c in (ConfigError, RefError, UnknownPipelineError,
                                     exceptions.StorageError, exceptions.CheckpointError,
                                     exceptions.TrainingFailedError,
                                     exceptions.RunInProgressError,
                                     exceptions.RunConfigMismatchError,
                                     exceptions.RunOwnershipLostError)}
    known["TaskError"] = JobFailedError  # tasks.TaskError: a failed step, retried
    return known.get(kind, JobFailedError)


def first_line(exc: BaseException) -> str:
    text = _storage.scrub(str(exc)).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


def default_log_sink(submission_id: str) -> Callable[[str], None]:
    def sink(line: str) -> None:
        logger.info("%s", line)

    return sink


class LogTail:
    """Streams a job's log lines to ``sink`` (prefixed ``[ray job <id>]``) from a thread
    that follows Ray's log websocket."""

    def __init__(self, client: Any, submission_id: str, sink: Callable[[str], None]) -> None:
        import threading

        self.client, self.submission_id, self.sink = client, submission_id, sink
        self.prefix = f"[ray job {submission_id}] "
        self._done = threading.Event()
        self._end_seen = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"trainyard-log-{submission_id}"[:60])
        self._partial = ""
        self._lock = threading.Lock()
        self._emitted = 0  # complete lines passed to the sink
        self._caught_up = False

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        import asyncio

        try:
            asyncio.run(self._follow())
        except Exception as exc:  # noqa: BLE001 - logs are a convenience
            logger.debug("Log tail of %s ended: %s", self.submission_id, exc)

    async def _follow(self) -> None:
        async for chunk in self.client.tail_job_logs(self.submission_id):
            self.feed(chunk)
            if self._done.is_set():
                break
        self.flush()

    def feed(self, chunk: str) -> None:
        with self._lock:
            if self._caught_up:  # catch_up() sent the rest already
                return
            text = self._partial + chunk
            *lines, self._partial = text.split("\n")
            self._emit(lines)

    def _emit(self, lines: List[str]) -> None:
        for line in lines:
            if line.startswith(RESULT_LINE_PREFIX):
                self._end_seen.set()
            self.sink(self.prefix + _storage.scrub(line.rstrip("\r")))
        self._emitted += len(lines)

    def catch_up(self, full_log: str) -> None:
        """Send the lines of the job's whole log (``get_job_logs``) that the stream has
        not delivered yet, and stop the stream's: Ray's log stream lags the log file by
        a second or more, and the job is done."""
        with self._lock:
            if self._caught_up:
                return
            self._caught_up = True
            lines = full_log.split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            self._partial = ""
            self._emit(lines[self._emitted:])
            self._end_seen.set()

    def flush(self) -> None:
        with self._lock:
            if self._partial and not self._caught_up:
                self.sink(self.prefix + _storage.scrub(self._partial))
                self._partial = ""

    @property
    def ended(self) -> bool:
        """Whether the job's last line (the entry's result line) has come through."""
        return self._end_seen.is_set()

    def wait_for_end(self, timeout: float) -> None:
        """Until the job's last line (the entry's result line) has come through."""
        self._end_seen.wait(timeout)

    def finish(self, timeout: float = 2.0) -> None:
        """Let the tail drain what the job wrote last (its socket closes at job end)."""
        self._thread.join(timeout)

    def close(self) -> None:
        self._done.set()
