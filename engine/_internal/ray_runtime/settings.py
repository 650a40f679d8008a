"""The settings of seconds the start and the exit read: a bad value warns and falls back
to its default (a start or an exit is no place to raise)."""

from __future__ import annotations

import logging
import os

from engine import constants

logger = logging.getLogger(__name__)


def _seconds_setting(name: str, default: float, meaning: str, example: str) -> float:
    """A setting of seconds >= 0; its default, with a warning, when it is not one (a
    start or an exit is no place to raise)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
        if value >= 0:
            return value
    except ValueError:
        pass
    logger.warning("%s=%r is not a number of seconds >= 0; %s %s s. Set it to e.g. %s.",
                   name, raw, meaning, default, example)
    return default


def _exit_log_wait_s() -> float:
    """``TRAINYARD_RAY_EXIT_LOG_WAIT_S``."""
    return _seconds_setting(constants.RAY_EXIT_LOG_WAIT_ENV_VAR,
                            constants.DEFAULT_RAY_EXIT_LOG_WAIT_S,
                            "waiting for the workers' output at exit at most", "0.5")


def _monitor_delay_s() -> float:
    """``TRAINYARD_RAY_MONITOR_DELAY_S``."""
    return _seconds_setting(constants.RAY_MONITOR_DELAY_ENV_VAR,
                            constants.DEFAULT_RAY_MONITOR_DELAY_S,
                            "starting Ray's autoscaler monitor after Ray by",
                            "10, or 0 to start it with Ray")
