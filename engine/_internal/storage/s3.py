"""What pyarrow's S3 filesystem cannot do, done with boto3 on the same endpoint and keys.

* Whole reads. pyarrow reads an object by taking its size (HEAD) and then fetching that
  many bytes with ranged GETs, so a read that overlaps a replace of the object (a run
  record its driver rewrites while a status listing, a resuming driver or an Airflow
  trigger reads it) gets the new version cut at the old length, or parts of both. One
  GET without a range is answered from one version of the object, whole, and boto3
  checks the body's length against the answer's ``Content-Length``. It is also one
  request where pyarrow's read takes two.
* Conditional PUTs (``If-None-Match``, ``If-Match``), which the run lease takes its
  lease with (``run_state.lease``), and with which a run's driver writes its files
  while its lease fences the run directory (``Storage.fence_with``): a PUT that a
  driver sent before it froze, and that reaches the server after another driver took
  the run over and rewrote the object, is refused (412) instead of overwriting it.

A client is made once per process and set of filesystem options and shared by the
process's threads (boto3 clients are thread-safe; each is made from its own session,
which is not; none is shared across a fork).
``client_for`` raises ``ImportError`` without boto3 (``pip install 'trainyard[s3]'``)
and ``NotImplementedError`` for options boto3 is not given here (an assumed role):
callers then keep to pyarrow.
"""

from __future__ import annotations

import os
import threading
import hashlib
from typing import Any, Dict, Optional, Tuple

from engine._internal.storage.retry import ServiceError

# The SDK's own attempts per request, the first one included (its standard retry
# mode; botocore's ``max_attempts`` would count only the retries), as pyarrow's S3
# filesystem makes them (``AwsStandardS3RetryStrategy(max_attempts=3)``); the storage
# layer's retry loop carries an operation over longer outages.
SDK_ATTEMPTS = 3

_clients: Dict[str, Any] = {}
_clients_lock = threading.Lock()


def client_for(fs: Any) -> Any:
    """The boto3 S3 client for a pyarrow ``S3FileSystem``'s endpoint, region, keys,
    timeouts, proxy, CA file and addressing (boto3's own credential chain when the
    filesystem names no keys)."""
    opts = fs.__reduce__()[1][0]  # S3FileSystem pickles its options as one dict
    # A forked child (a DataLoader worker, say) must not share its parent's connection
    # pool, whose sockets both would read from: a client per process.
    key = f"{os.getpid()} {sorted(opts.items())!r}"
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            try:
                client = _new_client(opts)
            except (ImportError, NotImplementedError) as exc:
                client = exc  # asked again on every read: remember the answer
            _clients[key] = client
    if isinstance(client, Exception):
        raise client
    return client


def _new_client(opts: Dict[str, Any]) -> Any:
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    if opts.get("role_arn"):
        raise NotImplementedError("the filesystem assumes a role (role_arn)")
    config: Dict[str, Any] = {"retries": {"mode": "standard",
                                         "total_max_attempts": SDK_ATTEMPTS}}
    kwargs: Dict[str, Any] = {}
    endpoint = opts.get("endpoint_override")
    if endpoint:
        kwargs["endpoint_url"] = endpoint if "://" in endpoint \
            else f"{opts.get('scheme') or 'https'}://{endpoint}"
    # pyarrow addresses buckets by path unless told otherwise; S3-compatible servers
    # (MinIO, Ceph, moto) on an endpoint of their own expect the same.
    config["s3"] = {"addressing_style": "virtual" if opts.get("force_virtual_addressing")
                    else "path" if endpoint else "auto"}
    if opts.get("region"):
        kwargs["region_name"] = opts["region"]
    if opts.get("anonymous"):
        config["signature_version"] = UNSIGNED
    elif opts.get("access_key"):
        kwargs.update(aws_access_key_id=opts["access_key"],
                      aws_secret_access_key=opts.get("secret_key"),
                      aws_session_token=opts.get("session_token") or None)
    if (opts.get("connect_timeout") or -1) > 0:
        config["connect_timeout"] = opts["connect_timeout"]
    if (opts.get("request_timeout") or -1) > 0:
        config["read_timeout"] = opts["request_timeout"]
    proxy = opts.get("proxy_options") or {}
    if proxy.get("host"):
        auth = f"{proxy['username']}:{proxy['password']}@" if proxy.get("username") else ""
        port = f":{proxy['port']}" if (proxy.get("port") or -1) > 0 else ""
        url = f"{proxy.get('scheme') or 'http'}://{auth}{proxy['host']}{port}"
        config["proxies"] = {"http": url, "https": url}
    if opts.get("tls_ca_file_path"):
        kwargs["verify"] = opts["tls_ca_file_path"]
    return boto3.session.Session().client("s3", config=Config(**config), **kwargs)


def client_error(exc: Any) -> Tuple[Optional[str], Optional[int]]:
    """``(error code, HTTP status)`` of botocore's ``ClientError``, each None when the
    answer has none."""
    code = str(exc.response.get("Error", {}).get("Code", "")) or None
    return code, exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def read_whole(client: Any, path: str, shown: str) -> bytes:
    """The bytes of the object at ``bucket/key`` ``path``, one version whole, from one
    GET. Raises ``FileNotFoundError`` when there is none, ``ConnectionError`` when the
    server cannot be reached or the answer breaks off, and :class:`ServiceError`
    (its code and HTTP status kept) for any other answer, so that the storage layer
    retries what passes (5xx, 429, the network) and nothing else."""
    from botocore.exceptions import (BotoCoreError, ClientError, ConnectionError as
                                     BotoConnectionError, HTTPClientError,
                                     IncompleteReadError)

    bucket, _, key = path.partition("/")
    try:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        code, status = client_error(exc)
        if status == 404 or code in ("NoSuchKey", "404"):
            raise FileNotFoundError(f"{shown} does not exist") from exc
        message = exc.response.get("Error", {}).get("Message", "")
        raise ServiceError(f"S3 answered {status} {code or ''} to a GET of {shown}: "
                           f"{message}".rstrip(": "), code=code, status=status) from exc
    except (BotoConnectionError, HTTPClientError, IncompleteReadError) as exc:
        raise ConnectionError(f"reading {shown}: {type(exc).__name__}: {exc}") from exc
    except BotoCoreError as exc:  # no credentials, a bad endpoint: not worth a retry
        raise ServiceError(f"reading {shown}: {type(exc).__name__}: {exc}",
                           code=type(exc).__name__, status=None) from exc


def _call(client: Any, what: str, shown: str, fn: Any, **kwargs: Any) -> Any:
    """``fn(**kwargs)`` with botocore's errors as the storage layer classifies them
    (see :func:`read_whole`); a 412 or 409 answer is returned as ``None``."""
    from botocore.exceptions import (BotoCoreError, ClientError, ConnectionError as
                                     BotoConnectionError, HTTPClientError)

    try:
        return fn(**kwargs)
    except ClientError as exc:
        code, status = client_error(exc)
        if status in (409, 412) or code in ("PreconditionFailed",
                                            "ConditionalRequestConflict"):
            return None
        if status == 404 or code in ("NoSuchKey", "404", "NotFound"):
            raise FileNotFoundError(f"{shown} does not exist") from exc
        message = exc.response.get("Error", {}).get("Message", "")
        raise ServiceError(f"S3 answered {status} {code or ''} to a {what} of {shown}: "
                           f"{message}".rstrip(": "), code=code, status=status) from exc
    except (BotoConnectionError, HTTPClientError) as exc:
        raise ConnectionError(f"{what} of {shown}: {type(exc).__name__}: {exc}") from exc
    except BotoCoreError as exc:
        raise ServiceError(f"{what} of {shown}: {type(exc).__name__}: {exc}",
                           code=type(exc).__name__, status=None) from exc


def read_with_etag(client: Any, path: str, shown: str) -> Tuple[Optional[bytes],
                                                                  Optional[str]]:
    """``(bytes, ETag)`` of the object at ``bucket/key`` ``path`` from one GET, or
    ``(None, None)`` when there is none: what a conditional PUT then checks against."""
    bucket, _, key = path.partition("/")
    try:
        out = _call(client, "GET", shown, client.get_object, Bucket=bucket, Key=key)
    except FileNotFoundError:
        return None, None
    if out is None:
        return None, None
    return out["Body"].read(), out["ETag"]


def holds(etag: Optional[str], data: bytes) -> bool:
    """Whether the object whose ETag is ``etag`` holds ``data`` (a single-part PUT's ETag
    is its MD5): how a writer whose PUT was refused after a retry finds that its own
    first try went through."""
    return etag is not None and etag.strip('"') == hashlib.md5(
        data, usedforsecurity=False).hexdigest()


def etag_of(client: Any, path: str, shown: str) -> Optional[str]:
    """The ETag of the object at ``bucket/key`` ``path``; None when there is none."""
    bucket, _, key = path.partition("/")
    try:
        out = _call(client, "HEAD", shown, client.head_object, Bucket=bucket, Key=key)
    except FileNotFoundError:
        return None
    return None if out is None else out["ETag"]


def put_if_unchanged(client: Any, path: str, data: bytes, shown: str,
                     etag: Optional[str]) -> Optional[str]:
    """PUT ``data`` at ``path`` only if the object is as its writer last saw it: the
    ETag ``etag``, or no object when ``etag`` is None. Returns the new ETag, or None
    when the object changed meanwhile."""
    bucket, _, key = path.partition("/")
    condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
    out = _call(client, "PUT", shown, client.put_object, Bucket=bucket, Key=key,
                Body=data, **condition)
    return None if out is None else out["ETag"]
