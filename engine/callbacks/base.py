"""The callback interfaces: :class:`Callback` (hooks with no-op defaults) and
:class:`LoggerCallback` (trial hooks mapped onto ``log_trial_*``). Public as
``engine.callbacks``; the built-in loggers in this package subclass them."""

from __future__ import annotations

from typing import Any, Dict, List

from engine._internal.execution.trial import Trial


class Callback:
    """Subclass and override the hooks you need; each one is a no-op by default.

    Run hooks (``on_run_*``, ``on_report`` …) come from one training run's controller;
    trial hooks (``on_trial_*``) from the Tuner, and from ``fit()`` presenting itself as
    a single trial. ``iteration`` in the trial hooks is the result's
    ``training_iteration`` in ``fit()`` and the Tuner's step count in a Tuner.
    """

    # --- one training run ----------------------------------------------------------
    def on_run_start(self, run_name: str, config: Dict[str, Any]) -> None:
        """Before the first worker group starts."""

    def on_report(self, metrics: Dict[str, Any], all_metrics: List[Dict[str, Any]]) -> None:
        """After each round: rank 0's metrics and every rank's."""

    def on_checkpoint(self, checkpoint: Any, metrics: Dict[str, Any]) -> None:
        """After a checkpoint is committed."""

    def on_failure(self, error: BaseException) -> None:
        """When a worker fails (before the retry decision)."""

    def on_retry(self, attempt: int) -> None:
        """When the worker group is restarted after a failure."""

    def on_run_end(self, result: Any) -> None:
        """After the run finished or failed."""

    # --- trials (Tuner, and fit() as one trial) ---------------------------------
    def on_trial_start(self, iteration: int, trials: List[Trial], trial: Trial,
                       **info: Any) -> None:
        """A trial starts (``trials``: every trial of the experiment so far)."""

    def on_trial_result(self, iteration: int, trials: List[Trial], trial: Trial,
                        result: Dict[str, Any], **info: Any) -> None:
        """A trial reported ``result`` (already in ``trial.last_result``)."""

    def on_trial_complete(self, iteration: int, trials: List[Trial], trial: Trial,
                          **info: Any) -> None:
        """A trial finished successfully."""

    def on_trial_error(self, iteration: int, trials: List[Trial], trial: Trial,
                       **info: Any) -> None:
        """A trial failed (its error is on ``trial.error``)."""

    # --- the Tuner's loop ---------------------------------------------------------
    def on_step_end(self, iteration: int, trials: List[Trial], **info: Any) -> None:
        """After each pass of the Tuner's event loop (about every 0.1 s while trials
        run), whether or not a trial reported."""

    def on_experiment_end(self, trials: List[Trial], **info: Any) -> None:
        """After the last trial of a Tuner run ended."""


class LoggerCallback(Callback):
    """A callback that logs trials: override ``log_trial_start``, ``log_trial_result``
    and ``log_trial_end``; the trial hooks are mapped onto them.

    Subclasses need not call ``super().__init__()``.
    """

    def log_trial_start(self, trial: Trial) -> None:
        """A trial starts."""

    def log_trial_result(self, iteration: int, trial: Trial, result: Dict[str, Any]) -> None:
        """A trial reported ``result``."""

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        """A trial ended; ``failed`` when it errored."""

    def on_trial_start(self, iteration: int, trials: List[Trial], trial: Trial,
                       **info: Any) -> None:
        self.log_trial_start(trial)

    def on_trial_result(self, iteration: int, trials: List[Trial], trial: Trial,
                        result: Dict[str, Any], **info: Any) -> None:
        self.log_trial_result(iteration, trial, result)

    def on_trial_complete(self, iteration: int, trials: List[Trial], trial: Trial,
                          **info: Any) -> None:
        self.log_trial_end(trial, failed=False)

    def on_trial_error(self, iteration: int, trials: List[Trial], trial: Trial,
                       **info: Any) -> None:
        self.log_trial_end(trial, failed=True)


__all__ = ["Callback", "LoggerCallback", "Trial"]
