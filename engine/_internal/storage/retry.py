"""Retrying remote storage: which errors are worth another try, and the retry loop.

An object store that stalls (a network blip, a server restarting, throttling) must not
fail a run that would go on a few seconds later. Every leaf operation on a remote
filesystem is retried with exponential backoff while its error is transient, for up to
``$TRAINYARD_STORAGE_RETRY_S`` seconds (default 120); each is idempotent (a PUT of the
same bytes, a delete, a move that checks whether it already happened).

Two layers retry. pyarrow's S3 filesystem retries each request itself with the AWS SDK's
standard strategy (``AwsStandardS3RetryStrategy(max_attempts=3)``, the default of
``FileSystem.from_uri``, which takes no retry option; a filesystem given as
``RunConfig(storage_filesystem=...)`` keeps whatever strategy its creator chose). Those
attempts span seconds; this layer carries an operation over an outage of minutes.

Errors are classified by type first (``TimeoutError``, ``ConnectionError``, an ``errno``),
then by the storage service's error code or HTTP status (5xx and 429 retried, other 4xx
not), never by matching free text.
"""

from __future__ import annotations

import errno
import functools
import logging
import re
import threading
import time
from typing import Any, Callable, Optional, Tuple, TypeVar

from engine import constants
from engine._internal.storage.uris import safe_reason

RETRY_ENV_VAR = constants.STORAGE_RETRY_ENV_VAR
DEFAULT_RETRY_S = constants.DEFAULT_STORAGE_RETRY_S
logger = logging.getLogger("engine")

# errno values of failures that pass: the network or the server, not the request.
_TRANSIENT_ERRNOS = frozenset({
    errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED,
    errno.EPIPE, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EAGAIN,
})
# Error codes of the AWS SDK (``Aws::S3::S3Errors``, the ones the SDK itself marks
# retryable) and of google-cloud-cpp (``StatusCode``) that mean "try again later".
_TRANSIENT_CODES = frozenset({
    "NETWORK_CONNECTION", "REQUEST_TIMEOUT", "SLOW_DOWN", "THROTTLING",
    "SERVICE_UNAVAILABLE", "INTERNAL_FAILURE", "REQUEST_TIME_TOO_SKEWED",
    "UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "RESOURCE_EXHAUSTED",
})
_TOO_MANY_REQUESTS = 429
# Arrow's formats: "AWS Error <S3Errors name>[ (HTTP status <code>)] during <op>
# operation: ..." (s3_internal.h, ErrorToStatus) and "google::cloud::Status(<CODE>: ...)"
# (gcsfs_internal.cc, ToArrowStatus).
_SERVICE_ERROR_RE = re.compile(
    r"AWS Error (?P<aws>[A-Z_]+)(?: \(HTTP status (?P<status>\d{3})\))?"
    r"|google::cloud::Status\((?P<gcs>[A-Z_]+)")

_retry_state = threading.local()
_F = TypeVar("_F", bound=Callable[..., Any])


class ServiceError(OSError):
    """An object store's answer from a client that reports it typed (boto3, in
    ``storage.s3``): its error code and HTTP status, each None when unknown."""

    def __init__(self, message: str, code: Optional[str], status: Optional[int]) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


def service_error(exc: BaseException) -> Tuple[Optional[str], Optional[int]]:
    """``(error code, HTTP status)`` of an object store's error, each None when unknown.

    The one place that reads an error's text, because there is nothing else to read:
    pyarrow raises a plain ``OSError`` for every failure the AWS SDK reports (no
    subclass, no ``errno``, no status attribute; checked with pyarrow 25 against 403,
    404, 429, 500, 502, 503 and a refused connection) and for most google-cloud-cpp
    ones, and keeps the SDK's error code and the HTTP status only in the message.
    A :class:`ServiceError` carries both as attributes.
    """
    if isinstance(exc, ServiceError):
        return exc.code, exc.status
    match = _SERVICE_ERROR_RE.search(str(exc))
    if match is None:
        return None, None
    status = match.group("status")
    return match.group("aws") or match.group("gcs"), int(status) if status else None


def is_transient(exc: BaseException) -> bool:
    """Whether a storage error is worth retrying (network, timeout, throttling, 5xx)."""
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno in _TRANSIENT_ERRNOS  # typed by the OS, or by Arrow (ENOENT…)
    code, status = service_error(exc)
    if status is not None:  # the SDK had no name for it: decide on the HTTP status
        return status >= 500 or status == _TOO_MANY_REQUESTS
    return code in _TRANSIENT_CODES


def retry_budget() -> float:
    """Seconds a remote operation is retried for (``$TRAINYARD_STORAGE_RETRY_S``)."""
    return constants.get(RETRY_ENV_VAR)


def retrying(method: _F) -> _F:
    """Retry a remote ``Storage`` operation on transient errors (local ones run once).
    Nested retrying operations do not retry on their own: the outermost one does."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.local or getattr(_retry_state, "active", False):
            return method(self, *args, **kwargs)
        _retry_state.active = True
        try:
            return _call_with_retries(self, method, args, kwargs)
        finally:
            _retry_state.active = False

    return wrapper  # type: ignore[return-value]


def _call_with_retries(storage: Any, method: Callable[..., Any], args: Any,
                       kwargs: Any) -> Any:
    budget = retry_budget()
    started = time.monotonic()
    deadline, delay, attempts = started + budget, 0.25, 0
    while True:
        try:
            out = method(storage, *args, **kwargs)
            if attempts:
                logger.warning("Storage %s answered again after %.1f s (%s).",
                               storage.display(), time.monotonic() - started,
                               method.__name__)
            return out
        except Exception as exc:  # noqa: BLE001 - filtered just below
            if not is_transient(exc) or time.monotonic() + delay > deadline:
                raise
            if not attempts:
                logger.warning(
                    "Storage %s is not answering (%s: %s); retrying for up to %.0f s "
                    "($%s).", storage.display(), type(exc).__name__,
                    safe_reason(exc)[:200], budget, RETRY_ENV_VAR)
            attempts += 1
            time.sleep(delay)
            delay = min(delay * 2, 8.0)
