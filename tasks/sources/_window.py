"""Time windows over partition values: ``{"column": "date", "last": "30d"}``, ``since`` /
``until``, and the parsing of the dates, times and durations they are written in.

A window is half-open, ``since <= value < until``, like an Airflow data interval: the run
whose interval ends at 2026-11-26T00:00 reads the partitions of 2026-11-25 and before,
not the one of 2026-11-26 that is still being written. A date-only partition value is
midnight UTC of that day.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any, Dict, List, Mapping, Optional

from engine.exceptions import ConfigError

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_WINDOW_KEYS = {"column", "last", "since", "until"}


@dataclass
class Window:
    """The window of partition values to read: ``since <= value < until`` on ``column``."""

    column: str
    since: Optional[datetime] = None
    until: Optional[datetime] = None

    def contains(self, value: datetime) -> bool:
        return (self.since is None or value >= self.since) and \
            (self.until is None or value < self.until)

    def describe(self) -> Dict[str, Any]:
        return {"column": self.column,
                "since": self.since.isoformat() if self.since else None,
                "until": self.until.isoformat() if self.until else None}


def to_datetime(value: Any, what: str) -> datetime:
    """A timezone-aware datetime (UTC when none is given) from a datetime, a date or an
    ISO 8601 string (``2026-11-25``, ``2026-11-25T03:00:00+00:00``, ``20261125``).

    Raises:
        ConfigError: not a date or time.
    """
    if isinstance(value, datetime):
        out = value
    elif isinstance(value, date):
        out = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            out = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(f"{what} {value!r} is not a date or time: use ISO 8601, e.g. "
                              "'2026-11-25' or '2026-11-25T03:00:00Z'.") from None
    else:
        raise ConfigError(f"{what} {value!r} is not a date or time: use ISO 8601, e.g. "
                          "'2026-11-25', a date or a datetime.")
    if out.tzinfo is None:
        out = out.replace(tzinfo=timezone.utc)
    # A pendulum/other datetime subclass becomes a plain one (it must pickle and compare).
    return datetime.fromtimestamp(out.timestamp(), tz=timezone.utc)


def parse_duration(text: Any) -> timedelta:
    """``"30d"`` → 30 days (units ``s``, ``m``, ``h``, ``d``, ``w``).

    Raises:
        ConfigError: anything else.
    """
    match = _DURATION_RE.match(str(text)) if isinstance(text, str) else None
    if not match:
        raise ConfigError(f"window 'last' {text!r}: use a number and a unit, e.g. '30d', "
                          "'12h', '2w' (s, m, h, d, w).")
    value = timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})
    if value <= timedelta(0):
        raise ConfigError(f"window 'last' {text!r} must be longer than zero.")
    return value


def make_window(window: Optional[Mapping[str, Any]], since: Any, until: Any,
                keys: List[str], shown: str) -> Optional[Window]:
    """The window of ``ingest(window=..., since=..., until=...)`` on a source whose
    partition keys are ``keys``; None when none of them is given.

    ``since``/``until`` arguments win over the same keys in ``window``. ``last`` counts
    back from ``until`` (default: now). The column defaults to the only partition key.

    Raises:
        ConfigError: unknown keys, a column that is not a partition key, both ``last``
            and ``since``, an empty interval, unparsable dates.
    """
    if window is None and since is None and until is None:
        return None
    spec = dict(window or {})
    unknown = sorted(set(spec) - _WINDOW_KEYS)
    if unknown:
        raise ConfigError(f"window has unknown keys {unknown}: use {sorted(_WINDOW_KEYS)}, "
                          "e.g. {'column': 'date', 'last': '30d'}.")
    column = spec.get("column")
    if column is None:
        if len(keys) != 1:
            raise ConfigError(f"Which partition key is the window on? {shown} is partitioned "
                              f"by {keys}: pass window={{'column': ..., ...}}.")
        column = keys[0]
    if column not in keys:
        raise ConfigError(f"window column {column!r} is not a partition key of {shown} (its "
                          f"keys: {keys}): a window selects whole partitions, so it must be "
                          "on a partition key (directory names like date=2026-11-25).")
    since = since if since is not None else spec.get("since")
    until = until if until is not None else spec.get("until")
    end = to_datetime(until, "until") if until is not None else None
    start = to_datetime(since, "since") if since is not None else None
    if spec.get("last") is not None:
        if start is not None:
            raise ConfigError("window: give 'last' or 'since', not both.")
        end = end or datetime.now(timezone.utc)
        start = end - parse_duration(spec["last"])
    if start is not None and end is not None and start >= end:
        raise ConfigError(f"window since {start.isoformat()} is not before until "
                          f"{end.isoformat()}: nothing can be in it.")
    return Window(column=str(column), since=start, until=end)
