"""Text that is safe to show: URIs without credentials or query (endpoint) parameters,
and known secret values masked in logs, errors and the run record.

A leaf module (standard library only), so that the lowest layers, ``engine.config``
among them, can redact a URI without importing the storage layer.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Set
from urllib.parse import unquote, urlsplit, urlunsplit

# Env variables whose values are secrets, scrubbed from any text the engine shows (key
# ids are identifiers, shown by the servers' own errors, and stay).
_SECRET_ENV_VARS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_MIN_SECRET_LEN = 6
_URI_RE = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")
# Words that give away a message naming the key material a server rejected.
_CREDENTIAL_WORDS = ("secret_key", "secret_access_key", "session_token", "signature=")

# Secrets seen in URIs (the password of user:password@), scrubbed from errors and logs.
_known_secrets: Set[str] = set()
_lock = threading.Lock()


def redact(uri: str) -> str:
    """A URI without credentials and query parameters, fit for logs and errors.

    Args:
        uri: A local path or a URI such as ``s3://key:secret@bucket/p?endpoint_override=h``.

    Returns:
        ``s3://bucket/p`` for that example; a local path or ``file://`` URI unchanged.
    """
    parts = urlsplit(uri)
    if not parts.scheme or parts.scheme == "file":
        return uri
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def learn_secrets(uri: str) -> None:
    """Note the password of a ``user:password@`` URI so that :func:`scrub` masks it."""
    userinfo, at, _ = urlsplit(uri).netloc.rpartition("@")
    _user, colon, password = userinfo.partition(":")
    if not (at and colon and password):
        return
    with _lock:
        _known_secrets.update((password, unquote(password)))


def scrub(text: str) -> str:
    """``text`` with every URI redacted and every known secret value masked.

    Used on anything that reaches a log, an error message or the run record.
    """
    if not text:
        return text
    text = _URI_RE.sub(lambda m: redact(m.group(0)), text)
    secrets = {os.environ.get(name, "") for name in _SECRET_ENV_VARS}
    with _lock:
        secrets |= _known_secrets
    for secret in sorted((s for s in secrets if len(s) >= _MIN_SECRET_LEN), key=len,
                         reverse=True):
        text = text.replace(secret, "***")
    return text


def safe_reason(exc: BaseException) -> str:
    """The first line of an error's message, scrubbed, at most 300 characters."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    text = scrub(text)
    # Never echo credentials: some messages name the key material they rejected.
    if any(word in text.lower() for word in _CREDENTIAL_WORDS):
        return "see the storage server's logs"
    return text[:300]
