"""Progress of a plain ``fit()``: a live status line on a terminal, plain lines otherwise.

``RunConfig(verbose=...)``:

* ``0``: nothing.
* ``1`` (default): on a terminal, one line redrawn in place (at most 5 times a second);
  when stdout is not a terminal (CI logs, Prefect and Airflow task logs), a line every
  ``PLAIN_PERIOD_S`` seconds. Retries and the end of the run always get their own line.
* ``2``: a line for every report.

A line reads::

    [TorchTrainer_2026-…] iter 12 | loss 0.1234 accuracy 0.95 | 3.1 it/s | 4.0 s | 2 ckpt

(iteration, up to four metrics — the checkpoint score attribute first —, reports per
second since the (re)start, elapsed time, checkpoints kept). It is a callback like any
other, driven by the controller's hooks; a broken terminal disables it, never the run.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Dict, List, Optional, TextIO

from engine import constants
from engine.callbacks import Callback

TTY_PERIOD_S = 0.2
PLAIN_PERIOD_S = 10.0
MAX_METRICS = 4
_AUTO = set(constants.AUTOMATIC_FIELDS)


class FitProgress(Callback):
    """Prints a ``fit()``'s progress (see the module docstring)."""

    def __init__(self, name: str, verbose: int, num_workers: int, path: str,
                 checkpoints_kept: Callable[[], int], score_attribute: Optional[str] = None,
                 out: Optional[TextIO] = None) -> None:
        self.name = name
        self.verbose = verbose
        self.num_workers = num_workers
        self.path = path
        self.checkpoints_kept = checkpoints_kept
        self.score_attribute = score_attribute
        self.out = out or sys.stdout
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self._start = time.monotonic()
        self._restart = self._start
        self._reports_since_restart = 0
        self._first_report: Optional[float] = None
        self._printed_iteration: Any = None  # the iteration of the last plain line
        self._last_draw = 0.0
        self._live = False  # a status line is on screen without its newline
        self._metrics: Dict[str, Any] = {}

    # --- hooks -------------------------------------------------------------------
    def on_run_start(self, run_name: str, config: Dict[str, Any]) -> None:
        self._start = self._restart = time.monotonic()
        self._line(f"== {self.name}: {self.num_workers} worker"
                   f"{'s' if self.num_workers != 1 else ''}, run directory {self.path}")

    def on_report(self, metrics: Dict[str, Any], all_metrics: List[Dict[str, Any]]) -> None:
        self._metrics = metrics
        now = time.monotonic()
        if self._first_report is None:
            self._first_report = now
        else:
            self._reports_since_restart += 1
        if self.verbose >= 2:
            self._line(self.status())
        elif self.tty:
            if now - self._last_draw >= TTY_PERIOD_S:
                self._draw(self.status())
                self._last_draw = now
        elif now - self._last_draw >= PLAIN_PERIOD_S:
            self._line(self.status())
            self._last_draw = now

    def on_retry(self, attempt: int) -> None:
        self._restart = time.monotonic()
        self._reports_since_restart = 0
        self._first_report = None
        self._line(f"== {self.name}: worker group restarting (retry {attempt}) from its "
                   f"latest checkpoint")

    def on_run_end(self, result: Any) -> None:
        failed = getattr(result, "error", None) is not None
        if self._metrics and self._live:
            self._draw(self.status())  # the final figures stay on screen
            self.out.write("\n")
            self._live = False
        elif self._metrics and self._printed_iteration != self._metrics.get(
                "training_iteration"):
            self._line(self.status())
        ckpt = getattr(result, "checkpoint", None)
        where = f"; checkpoint {ckpt.path}" if ckpt is not None else ""
        self._line(f"== {self.name}: {'FAILED' if failed else 'finished'} after "
                   f"{_duration(time.monotonic() - self._start)}{where}")

    # --- rendering ---------------------------------------------------------------
    def status(self) -> str:
        m = self._metrics
        parts = [f"[{self.name}] iter {m.get('training_iteration', '?')}"]
        shown = self.key_metrics(m)
        if shown:
            parts.append(" ".join(f"{k} {_fmt(v)}" for k, v in shown.items()))
        # Reports per second between the first report after the (re)start and now, so
        # that start-up does not count against the rate.
        if self._first_report is not None and self._reports_since_restart:
            span = time.monotonic() - self._first_report
            if span > 0:
                parts.append(f"{self._reports_since_restart / span:.3g} it/s")
        parts.append(_duration(time.monotonic() - self._start))
        try:
            kept = self.checkpoints_kept()
        except Exception:  # noqa: BLE001 - progress must never fail the run
            kept = None
        if kept is not None:
            parts.append(f"{kept} ckpt")
        return " | ".join(parts)

    def key_metrics(self, metrics: Dict[str, Any]) -> Dict[str, Any]:
        """Up to ``MAX_METRICS`` user metrics that are plain numbers, the score first."""
        names = [k for k, v in metrics.items()
                 if k not in _AUTO and _is_number(v)]
        if self.score_attribute in names:
            names.remove(self.score_attribute)
            names.insert(0, self.score_attribute)
        return {k: metrics[k] for k in names[:MAX_METRICS]}

    def _draw(self, text: str) -> None:
        width = _terminal_width()
        if len(text) > width - 1:
            text = text[:width - 2] + "…"
        self.out.write("\r\x1b[K" + text)
        self.out.flush()
        self._live = True
        self._printed_iteration = None

    def _line(self, text: str) -> None:
        if self.verbose < 1:
            return
        if text.startswith("["):
            self._printed_iteration = self._metrics.get("training_iteration")
        if self._live:
            self.out.write("\r\x1b[K")
            self._live = False
        self.out.write(text + "\n")
        self.out.flush()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _terminal_width() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).columns


__all__ = ["FitProgress"]
