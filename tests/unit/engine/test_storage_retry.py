"""Which storage errors are retried: decided on the error's type and on the object
store's error code / HTTP status, checked against real pyarrow S3 errors from a server
that answers what the test tells it to."""

from __future__ import annotations

import errno
import http.server
import threading
from typing import List

import pyarrow.fs as pafs
import pytest

import engine._internal.storage.retry as retry_mod
from engine._internal.storage.retry import is_transient, service_error
from engine.storage import Storage

PAYLOAD = b"checkpoint bytes"


def _aws(code: str, status: str = "") -> OSError:
    """An OSError as pyarrow raises it for an S3 failure (its exact format)."""
    return OSError(f"When reading information for key 'k' in bucket 'b': AWS Error "
                   f"{code}{status} during HeadObject operation: No response body.")


@pytest.mark.parametrize("exc, transient", [
    (_aws("UNKNOWN", " (HTTP status 503)"), True),
    (_aws("UNKNOWN", " (HTTP status 500)"), True),
    (_aws("UNKNOWN", " (HTTP status 429)"), True),
    (_aws("SLOW_DOWN"), True),
    (_aws("SERVICE_UNAVAILABLE"), True),
    (_aws("INTERNAL_FAILURE"), True),
    (_aws("REQUEST_TIMEOUT"), True),
    (_aws("NETWORK_CONNECTION"), True),
    (_aws("ACCESS_DENIED"), False),
    (_aws("NO_SUCH_BUCKET"), False),
    (_aws("UNKNOWN", " (HTTP status 403)"), False),
    (_aws("UNKNOWN", " (HTTP status 404)"), False),
    (_aws("UNKNOWN", " (HTTP status 400)"), False),
    (OSError("google::cloud::Status(UNAVAILABLE: Retry policy exhausted)"), True),
    (OSError("google::cloud::Status(DEADLINE_EXCEEDED: ...)"), True),
    (OSError("google::cloud::Status(FAILED_PRECONDITION: generation mismatch)"), False),
    (ConnectionResetError(errno.ECONNRESET, "reset by peer"), True),
    (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), True),
    (BrokenPipeError(errno.EPIPE, "broken pipe"), True),
    (TimeoutError("read timed out"), True),
    (OSError(errno.ETIMEDOUT, "timed out"), True),
    (FileNotFoundError(errno.ENOENT, "Path does not exist"), False),
    (PermissionError(errno.EACCES, "denied"), False),
    (ValueError("not a storage error"), False),
])
def test_errors_are_classified_by_type_then_code_or_status(exc, transient):
    assert is_transient(exc) is transient


def test_service_error_reads_code_and_status_from_arrows_format():
    assert service_error(_aws("UNKNOWN", " (HTTP status 503)")) == ("UNKNOWN", 503)
    assert service_error(_aws("ACCESS_DENIED")) == ("ACCESS_DENIED", None)
    assert service_error(OSError("no code here, 503 Service Unavailable")) == (None, None)


class _S3Stub(http.server.BaseHTTPRequestHandler):
    """Answers each request with the next status of ``failures`` (S3's XML error body),
    then serves ``PAYLOAD`` for every key."""

    protocol_version = "HTTP/1.1"
    failures: List[int] = []
    requests: List[str] = []

    def _answer(self) -> None:
        type(self).requests.append(self.command)
        if type(self).failures:
            self._error(type(self).failures.pop(0))
            return
        ranged = self.headers.get("Range")
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.send_header("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")
        self.send_header("ETag", '"0"')
        if ranged:
            self.send_header("Content-Range", f"bytes 0-{len(PAYLOAD) - 1}/{len(PAYLOAD)}")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(PAYLOAD)

    def _error(self, status: int) -> None:
        body = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>Err</Code>"
                b"<Message>injected</Message></Error>")
        self.send_response(status)
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = _answer

    def log_message(self, *args: object) -> None:
        pass


READERS = {  # how each reader asks for an object, and how it names a 403 and a 503
    "boto3": ("GET", "answered 403", "answered 503"),
    "pyarrow": ("HEAD", "ACCESS_DENIED", "HTTP status 503"),
}


@pytest.fixture(params=sorted(READERS))
def s3_stub(monkeypatch, request):
    """A loopback S3 endpoint and a Storage on it whose SDK does not retry (one
    attempt), so every retry seen is the storage layer's; reading through boto3 (one
    whole GET, ``storage_s3``) and through pyarrow alone (without boto3)."""
    import engine._internal.storage.s3 as s3_mod

    monkeypatch.setattr(retry_mod.time, "sleep", lambda s: None)
    monkeypatch.setattr(s3_mod, "SDK_ATTEMPTS", 1)
    monkeypatch.setattr(s3_mod, "_clients", {})
    if request.param == "pyarrow":
        monkeypatch.setattr(Storage, "_sdk_client", lambda self: None)
    monkeypatch.setattr(_S3Stub, "failures", [])
    monkeypatch.setattr(_S3Stub, "requests", [])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _S3Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fs = pafs.S3FileSystem(
        endpoint_override=f"127.0.0.1:{server.server_address[1]}", scheme="http",
        access_key="test-key", secret_key="test-secret", connect_timeout=2,
        request_timeout=2, retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
    try:
        yield Storage(fs, "bucket/run"), _S3Stub, READERS[request.param]
    finally:
        server.shutdown()
        server.server_close()


def test_a_503_is_retried_until_the_server_answers(s3_stub, caplog):
    st, stub, (first, _, _) = s3_stub
    stub.failures.extend([503, 503])
    with caplog.at_level("WARNING", logger="engine"):
        assert st.read_bytes("bucket/run/model.pt") == PAYLOAD
    assert stub.requests[:3] == [first] * 3  # two 503s, then through
    assert "is not answering" in caplog.text and "answered again" in caplog.text


@pytest.mark.parametrize("status", [403, 404])
def test_a_403_or_404_fails_at_once(s3_stub, status):
    st, stub, (first, denied, _) = s3_stub
    stub.failures.extend([status] * 5)
    with pytest.raises(FileNotFoundError if status == 404 else OSError,
                       match=denied if status == 403 else "does not exist"):
        st.read_bytes("bucket/run/model.pt")
    assert stub.requests == [first]  # one request: nothing retried


def test_retry_budget_comes_from_the_environment(monkeypatch, s3_stub):
    st, stub, (first, _, unavailable) = s3_stub
    monkeypatch.setenv("TRAINYARD_STORAGE_RETRY_S", "0")
    stub.failures.extend([503] * 3)
    with pytest.raises(OSError, match=unavailable):
        st.read_bytes("bucket/run/model.pt")
    assert stub.requests == [first]  # no budget: the first transient error is final

