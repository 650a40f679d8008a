"""The Tuner's progress output: a live table on a terminal, plain periodic lines otherwise.

Rows: trial name, status, the searched parameters, iteration, and the metric (the
TuneConfig's, else the last number the trial reported). It is a :class:`Callback` on the
Tuner's hooks (``on_step_end``, ``on_experiment_end``), first in the Tuner's callback
list when ``RunConfig(verbose >= 1)``; ``verbose=2`` also prints a line per result.
"""

from __future__ import annotations

import sys
import time
from typing import Any, List, Optional, Sequence, TextIO

from engine.callbacks import Callback
from engine.tune.search import Path, get_path

TTY_PERIOD_S = 1.0
PLAIN_PERIOD_S = 30.0
MAX_ROWS = 20
_ORDER = {"RUNNING": 0, "PENDING": 1, "PAUSED": 2, "ERROR": 3, "TERMINATED": 4}


class ProgressReporter(Callback):
    def __init__(self, name: str, metric: Optional[str], params: Sequence[Path],
                 out: Optional[TextIO] = None, verbose: int = 1) -> None:
        self.name = name
        self.verbose = verbose
        self.metric = metric
        self.params = list(params)
        self.out = out or sys.stdout
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self._start = time.monotonic()
        self._last = 0.0
        self._lines_drawn = 0

    # --- hooks -------------------------------------------------------------------
    def on_step_end(self, iteration: int, trials: List[Any], **info: Any) -> None:
        self.maybe_report(trials)

    def on_trial_result(self, iteration: int, trials: List[Any], trial: Any,
                        result: dict, **info: Any) -> None:
        if self.verbose >= 2 and not self.tty:
            value = result.get(self.metric) if self.metric else _last_number(result)
            self._write([f"{trial.trial_name}: iter {_fmt(result.get('training_iteration'))}"
                         f" {self.metric or 'metric'} {_fmt(value)}"])

    def on_experiment_end(self, trials: List[Any], **info: Any) -> None:
        self.final(trials)

    def maybe_report(self, trials: List[Any]) -> None:
        period = TTY_PERIOD_S if self.tty else PLAIN_PERIOD_S
        now = time.monotonic()
        if now - self._last < period:
            return
        self._last = now
        if self.tty:
            self._draw(self.table(trials))
        else:
            self._write([self.status_line(trials)])

    def final(self, trials: List[Any]) -> None:
        lines = self.table(trials)
        if self.tty:
            self._draw(lines)
        else:
            self._write(lines)

    # --- rendering ---------------------------------------------------------------
    def status_line(self, trials: List[Any]) -> str:
        counts: dict = {}
        for t in trials:
            counts[t.status] = counts.get(t.status, 0) + 1
        parts = " | ".join(f"{n} {s}" for s, n in sorted(counts.items(),
                                                        key=lambda kv: _ORDER.get(kv[0], 9)))
        return (f"== Tuner {self.name}: {len(trials)} trials ({parts or 'none yet'}), "
                f"{time.monotonic() - self._start:.1f} s")

    def table(self, trials: List[Any]) -> List[str]:
        metric = self.metric
        header = ["trial", "status"] + [p[-1] for p in self.params] + ["iter",
                                                                        metric or "metric"]
        ordered = sorted(trials, key=lambda t: (_ORDER.get(t.status, 9), t.trial_id))
        rows = []
        for t in ordered[:MAX_ROWS]:
            result = t.last_result or {}
            value: Any = result.get(metric) if metric else _last_number(result)
            rows.append([t.trial_name, t.status]
                        + [_fmt(get_path(t.config, p)) for p in self.params]
                        + [_fmt(result.get("training_iteration")), _fmt(value)])
        widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
        lines = [self.status_line(trials)]
        lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                  for r in [header] + rows]
        if len(ordered) > MAX_ROWS:
            lines.append(f"... and {len(ordered) - MAX_ROWS} more trials")
        return lines

    def _draw(self, lines: List[str]) -> None:
        if self._lines_drawn:
            self.out.write(f"\x1b[{self._lines_drawn}F\x1b[J")  # back up and clear
        self._write(lines)
        self._lines_drawn = len(lines)

    def _write(self, lines: List[str]) -> None:
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()


def _last_number(result: dict) -> Any:
    from engine import constants

    for key in reversed(list(result)):
        value = result[key]
        if key not in constants.AUTOMATIC_FIELDS and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            return value
    return None


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.5g}"
    return str(value)


__all__ = ["ProgressReporter"]
