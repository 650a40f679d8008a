"""SIGTERM in a driver that started Ray: exit through the exit handlers, never by an abort
Ray's core worker armed (``ray._private``: Ray's handler, found by its module)."""

from __future__ import annotations

import logging

from engine._internal.ray_runtime.versions import written_for

logger = logging.getLogger(__name__)


def _exit_on_sigterm(signum, frame):
    """The handler ``ray.init()`` installs in the main thread (``sys.exit(signum)``: the
    exit handlers, Ray's shutdown among them, run), plus one thing: it cancels the abort
    that Ray's core worker armed on the same signal.

    The core worker installs Abseil's failure-signal handler for SIGTERM, which prints
    "*** SIGTERM received ***", chains to this handler, and sets a 3-second ``alarm()``
    whose SIGALRM calls ``abort()`` (``alarm_on_failure_secs``, for a crash handler that
    hangs). An exit that takes longer than that (Ray's own shutdown alone took over 3 s
    at load average 20 on the 2-core VM) ended with SIGABRT (-6) instead of 15, its
    exit handlers cut short; 6 of 8 SIGTERMed drivers did, with a foreground start too.
    """
    import signal
    import sys

    signal.alarm(0)
    sys.exit(signum)


def _replace_rays_sigterm_handler() -> None:
    """After ``ray.init()`` in the main thread: :func:`_exit_on_sigterm` in place of Ray's
    handler (only Ray's: a handler installed since is left as it is)."""
    import signal

    if not written_for("the SIGTERM handler that cancels Ray's pending abort"):
        return
    current = signal.getsignal(signal.SIGTERM)
    if getattr(current, "__module__", None) == "ray._private.worker":
        signal.signal(signal.SIGTERM, _exit_on_sigterm)


def set_exit_on_sigterm_from_main_thread() -> None:
    """What ``ray.init()`` does in the main thread and cannot do from another (a start in
    the background): a SIGTERM ends the script through its exit handlers, with Ray's
    ``set_sigterm_handler`` (which chains to the handler it replaces)."""
    if not written_for("the SIGTERM handler of a start in the background"):
        return
    import ray._private.utils

    ray._private.utils.set_sigterm_handler(_exit_on_sigterm)
