"""Ray's notices that need no action, kept out of the user's output (log filters)."""

from __future__ import annotations

import contextlib
import logging


class _DropMessages(logging.Filter):
    def __init__(self, fragments: tuple) -> None:
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(f in message for f in self.fragments)


# Ray's notice that ray.init() outside the main thread sets no SIGTERM handler: a
# background start sets Ray's handler itself, from the caller's (main) thread.
_NOT_MAIN_THREAD_NOTICE = _DropMessages(("SIGTERM handler is not set",))


@contextlib.contextmanager
def _quiet_ray_start():
    """Keep Ray's start-up notices that need no action out of the user's output.

    Ray 2.60 warns on every local start that token authentication is *enabled* (its
    secure default, on an instance only this machine uses); the warning that it is
    *disabled* still shows."""
    target = logging.getLogger("ray._private.authentication.authentication_token_setup")
    quiet = _DropMessages(("Token authentication is enabled for this Ray cluster",))
    target.addFilter(quiet)
    try:
        yield
    finally:
        target.removeFilter(quiet)
