"""The settings of seconds the local start and the exit read.

Both are read when the local instance starts (``constants.get``: a bad value fails the
start with a SettingError that names the variable); the exit uses the wait read then,
since an exit handler can only swallow an error."""

from __future__ import annotations

from typing import Optional

from engine import constants

_exit_log_wait: Optional[float] = None  # read by the last local start


def read_at_start() -> float:
    """Check both settings and remember the exit's wait; returns the monitor's delay."""
    global _exit_log_wait
    _exit_log_wait = constants.get(constants.RAY_EXIT_LOG_WAIT_ENV_VAR)
    return constants.get(constants.RAY_MONITOR_DELAY_ENV_VAR)


def exit_log_wait_s() -> float:
    """``TRAINYARD_RAY_EXIT_LOG_WAIT_S`` as the local start read it."""
    if _exit_log_wait is None:
        return constants.DEFAULT_RAY_EXIT_LOG_WAIT_S
    return _exit_log_wait
