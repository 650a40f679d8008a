"""URI text that is safe to show: no credentials, no query (endpoint) parameters.

A leaf module (standard library only), so that the lowest layers, ``engine.config``
among them, can redact a URI without importing the storage layer.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact(uri: str) -> str:
    """Drop credentials and query parameters from a URI before it is logged or raised."""
    parts = urlsplit(uri)
    if not parts.scheme or parts.scheme == "file":
        return uri
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
