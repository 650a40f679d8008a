"""Calling callbacks: error isolation, the default loggers, and fit() as a single trial."""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence

from engine import constants
from engine._internal.execution import trial as _trial
from engine._internal.execution.trial import Trial
from engine._internal.storage.filesystem import scrub
from engine.callbacks.files import CSVLoggerCallback, JsonLoggerCallback

logger = logging.getLogger("engine")


def default_callbacks(user_callbacks: Sequence[Any]) -> List[Any]:
    """``JsonLoggerCallback`` and ``CSVLoggerCallback`` unless the user passed one of
    that type already or ``TRAINYARD_DISABLE_DEFAULT_LOGGERS=1``."""
    if constants.get(constants.DISABLE_DEFAULT_LOGGERS_ENV_VAR):
        return []
    return [cls() for cls in (JsonLoggerCallback, CSVLoggerCallback)
            if not any(isinstance(cb, cls) for cb in user_callbacks)]


class CallbackRunner:
    """Calls a hook on every callback in order. A callback that raises is logged once
    with its traceback and disabled for the rest of the run; training goes on and
    :attr:`errors` (``Result.callback_errors``) lists it."""

    def __init__(self, callbacks: Sequence[Any]) -> None:
        self.callbacks = list(callbacks)
        self.errors: List[str] = []
        self._disabled: set = set()
        self.trial: Optional[Trial] = None

    @classmethod
    def with_defaults(cls, callbacks: Optional[Sequence[Any]]) -> "CallbackRunner":
        user = list(callbacks or [])
        return cls(default_callbacks(user) + user)

    def call(self, hook: str, *args: Any, **kwargs: Any) -> None:
        for cb in self.callbacks:
            if id(cb) in self._disabled:
                continue
            method = getattr(cb, hook, None)
            if method is None:
                continue
            try:
                method(*args, **kwargs)
            except Exception as exc:  # a broken callback must not end the training
                self._disable(cb, hook, exc)

    def _disable(self, cb: Any, hook: str, exc: Exception) -> None:
        self._disabled.add(id(cb))
        what = f"{type(cb).__name__}.{hook}"
        self.errors.append(scrub(f"{what} raised {type(exc).__name__}: {exc}"))
        logger.error("Callback %s raised %s; it is disabled for the rest of this run "
                     "(training goes on, Result.callback_errors lists it).", what,
                     type(exc).__name__, exc_info=exc)

    # --- a plain fit() as one trial ---------------------------------------------
    def start_run(self, run_name: str, config: Dict[str, Any], trial: Trial) -> None:
        self.trial = trial
        trial.status = _trial.RUNNING
        self.call("on_run_start", run_name, config)
        self.call("on_trial_start", 0, [trial], trial)

    def report(self, metrics: Dict[str, Any], all_metrics: List[Dict[str, Any]],
               checkpoint: Any = None) -> None:
        """One round: ``on_report``, the trial's result, then ``on_checkpoint``."""
        self.call("on_report", metrics, all_metrics)
        trial = self.trial
        if checkpoint is not None and trial is not None:
            trial.checkpoint = checkpoint
        if trial is not None:
            trial.last_result = metrics
            self.call("on_trial_result", _iteration(trial), [trial], trial, metrics)
        if checkpoint is not None:
            self.call("on_checkpoint", checkpoint, metrics)

    def adopted(self, checkpoint: Any) -> None:
        """A checkpoint the run took from another (PBT's exploit), now its latest."""
        if self.trial is not None:
            self.trial.checkpoint = checkpoint
        self.call("on_checkpoint", checkpoint, checkpoint.metrics)

    def end_trial(self, error: Optional[BaseException] = None) -> None:
        trial, self.trial = self.trial, None
        if trial is None:
            return
        if error is None:
            trial.status = _trial.TERMINATED
            self.call("on_trial_complete", _iteration(trial), [trial], trial)
        else:
            trial.status, trial.error = _trial.ERROR, error
            self.call("on_trial_error", _iteration(trial), [trial], trial)

    def end_run(self, result: Any, error: Optional[BaseException] = None) -> None:
        self.end_trial(error)
        self.call("on_run_end", result)


def _iteration(trial: Trial) -> int:
    return int((trial.last_result or {}).get("training_iteration", 0) or 0)
