"""POSTing a notification to a webhook: best effort, never raising.

A notification tells someone that a run failed or a candidate was turned down; the run's
outcome is already decided and recorded when it is sent. So a webhook that is down, slow
or answers an error is logged as a warning and reported as ``False``, never raised: the
pipeline does not fail because its messenger did.

Standard library only (no orchestrator): the Prefect hooks and the Airflow notifier use
it (the one webhook client of trainyard), and any other caller may.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from urllib.parse import urlsplit
from typing import Any, Mapping, Optional

from engine import constants
from engine.constants import NOTIFY_WEBHOOK_ENV_VAR

logger = logging.getLogger("tasks.notify")

#: Seconds to wait for the webhook: a hook must not hold up the run's end for long.
TIMEOUT_S = 10.0


def webhook_url(url: Optional[str] = None) -> Optional[str]:
    """``url``, else ``$TRAINYARD_NOTIFY_WEBHOOK``, else None (notifications off)."""
    return url or constants.get(NOTIFY_WEBHOOK_ENV_VAR) or None


def post_json(url: str, message: Mapping[str, Any], timeout: float = TIMEOUT_S,
              check: str = NOTIFY_WEBHOOK_ENV_VAR) -> bool:
    """POST ``message`` as JSON to ``url``.

    Args:
        url: The webhook (``http(s)://…``).
        message: A JSON-serialisable mapping (other values are sent as strings).
        timeout: Seconds to wait for an answer.
        check: What the warning tells a reader to check (where the URL came from).

    Returns:
        True if the webhook took it; False (and a warning logged, naming only the
        webhook's host: its path often holds a token) if it is down, too slow, or
        answered an error.
    """
    body = json.dumps(dict(message), default=str).encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return True  # urlopen raises HTTPError for an error status
    except (OSError, ValueError) as exc:  # URLError, HTTPError, timeouts, a bad URL
        logger.warning("Could not send the %r notification to %s (%s: %s); the run goes "
                       "on. Check %s.", message.get("event"), _host(url),
                       type(exc).__name__, exc, check)
        return False


def _host(url: str) -> str:
    """``scheme://host:port`` of a URL: no user info, path or query (Slack-style webhooks
    carry their secret in the path)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}" if parts.netloc else "?"


def notify(message: Mapping[str, Any], url: Optional[str] = None) -> bool:
    """POST ``message`` to ``url`` or ``$TRAINYARD_NOTIFY_WEBHOOK``; False when neither
    is set (nothing sent) or the webhook failed (logged)."""
    target = webhook_url(url)
    return post_json(target, message) if target else False


__all__ = ["TIMEOUT_S", "notify", "post_json", "webhook_url"]
