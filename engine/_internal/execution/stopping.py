"""Stopping criteria (``RunConfig(stop=...)``) with Ray Tune's semantics.

``stop`` is a dict of metric thresholds, a function ``f(trial_id, result) -> bool`` or a
:class:`Stopper`. The classes live here, below the controller (which applies ``stop`` to
a single ``fit()``) and the trial loop (which applies one shared stopper to every trial
of a Tuner); ``engine.tune.stopper`` is their public home.
"""

from __future__ import annotations

import datetime
import logging
import math
import statistics
import time
from collections import defaultdict, deque
from typing import Any, Callable, Deque, Dict, List, Optional, Union

from engine._internal.execution.failure_policy import FatalError
from engine._internal.run_state.spec import TrialAction, TrialDecision
from engine._internal.worker_group.metrics import lookup
from engine.exceptions import ConfigError

logger = logging.getLogger("engine")

Result = Dict[str, Any]


class StopperError(FatalError):
    """The stopping criterion raised (or cannot be applied): the run fails, no retry."""


class Stopper:
    """Base class: ``__call__`` decides for one trial after each result, ``stop_all``
    for the whole experiment (checked after each result and once per poll)."""

    def __call__(self, trial_id: str, result: Result) -> bool:
        """Whether the trial ``trial_id`` stops after ``result``."""
        raise NotImplementedError

    def stop_all(self) -> bool:
        """Whether every trial (and the experiment) stops now."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class NoopStopper(Stopper):
    """Never stops."""

    def __call__(self, trial_id: str, result: Result) -> bool:
        return False


class FunctionStopper(Stopper):
    """A function ``f(trial_id, result) -> bool`` as a stopper.

    Args:
        function: Called after each result of each trial.
    """

    def __init__(self, function: Callable[[str, Result], bool]) -> None:
        if not callable(function):
            raise ConfigError(f"FunctionStopper({function!r}) needs a function "
                              "f(trial_id, result) -> bool.")
        self._fn = function

    def __call__(self, trial_id: str, result: Result) -> bool:
        return bool(self._fn(trial_id, result))

    def __repr__(self) -> str:
        return f"FunctionStopper({getattr(self._fn, '__qualname__', self._fn)!r})"


class MaximumIterationStopper(Stopper):
    """Stops a trial after ``max_iter`` results (counted per trial).

    Args:
        max_iter: Number of results after which a trial stops.
    """

    def __init__(self, max_iter: int) -> None:
        if not isinstance(max_iter, int) or isinstance(max_iter, bool) or max_iter < 1:
            raise ConfigError(f"MaximumIterationStopper(max_iter={max_iter!r}) must be an "
                              "integer >= 1.")
        self._max_iter = max_iter
        self._iter: Dict[str, int] = defaultdict(int)

    def __call__(self, trial_id: str, result: Result) -> bool:
        self._iter[trial_id] += 1
        return self._iter[trial_id] >= self._max_iter


class TrialPlateauStopper(Stopper):
    """Stops a trial when the standard deviation of its last ``num_results`` values of
    ``metric`` is below ``std`` (after ``grace_period`` results, and once
    ``metric_threshold`` is reached when one is given).

    Args:
        metric: The metric to watch.
        std: Stop when the (population) standard deviation is below this.
        num_results: How many of the latest results count (>= 2).
        grace_period: Never stop before this many results.
        metric_threshold: Stop only once the metric is at least this good.
        mode: ``"min"`` or ``"max"``; required with ``metric_threshold``.
    """

    def __init__(self, metric: str, std: float = 0.01, num_results: int = 4,
                 grace_period: int = 4, metric_threshold: Optional[float] = None,
                 mode: Optional[str] = None) -> None:
        if mode is not None and mode not in ("min", "max"):
            raise ConfigError(f"TrialPlateauStopper(mode={mode!r}) must be 'min' or 'max'.")
        if not isinstance(num_results, int) or num_results < 2:
            raise ConfigError(f"TrialPlateauStopper(num_results={num_results!r}) must be an "
                              "integer >= 2.")
        if not isinstance(grace_period, int) or grace_period < 0:
            raise ConfigError(f"TrialPlateauStopper(grace_period={grace_period!r}) must be "
                              "an integer >= 0.")
        if not isinstance(std, (int, float)) or std <= 0:
            raise ConfigError(f"TrialPlateauStopper(std={std!r}) must be a number > 0.")
        if metric_threshold is not None and mode is None:
            raise ConfigError("TrialPlateauStopper(metric_threshold=...) needs mode='min' "
                              "or mode='max'.")
        self._metric, self._std = metric, float(std)
        self._num_results, self._grace_period = num_results, grace_period
        self._threshold, self._mode = metric_threshold, mode
        self._iter: Dict[str, int] = defaultdict(int)
        self._results: Dict[str, Deque[Any]] = defaultdict(
            lambda: deque(maxlen=self._num_results))

    def __call__(self, trial_id: str, result: Result) -> bool:
        value = result.get(self._metric)
        self._results[trial_id].append(value)
        self._iter[trial_id] += 1
        if self._iter[trial_id] < self._grace_period:
            return False
        if len(self._results[trial_id]) < self._num_results:
            return False
        if self._threshold is not None and value is not None:
            if (self._mode == "min" and value > self._threshold) or \
                    (self._mode == "max" and value < self._threshold):
                return False
        return _std(list(self._results[trial_id])) < self._std


class ExperimentPlateauStopper(Stopper):
    """Stops the whole experiment when the ``top`` best values of ``metric`` (over every
    result of every trial) have a standard deviation at most ``std``, for ``patience``
    more results after they first did.

    Args:
        metric: The metric to watch.
        std: Plateau when the top values' standard deviation is at most this.
        top: How many best values count.
        mode: ``"min"`` or ``"max"``: which values are best.
        patience: Results to wait after the plateau is first reached.
    """

    def __init__(self, metric: str, std: float = 0.001, top: int = 10, mode: str = "min",
                 patience: int = 0) -> None:
        if mode not in ("min", "max"):
            raise ConfigError(f"ExperimentPlateauStopper(mode={mode!r}) must be 'min' or "
                              "'max'.")
        if not isinstance(top, int) or top < 1:
            raise ConfigError(f"ExperimentPlateauStopper(top={top!r}) must be an integer "
                              ">= 1.")
        if not isinstance(std, (int, float)) or std <= 0:
            raise ConfigError(f"ExperimentPlateauStopper(std={std!r}) must be a number > 0.")
        if not isinstance(patience, int) or patience < 0:
            raise ConfigError(f"ExperimentPlateauStopper(patience={patience!r}) must be an "
                              "integer >= 0.")
        self._metric, self._std, self._top = metric, float(std), top
        self._mode, self._patience = mode, patience
        self._top_values: List[float] = []
        self._iterations = 0

    def __call__(self, trial_id: str, result: Result) -> bool:
        self._top_values.append(result[self._metric])
        ordered = sorted(self._top_values)
        self._top_values = ordered[:self._top] if self._mode == "min" \
            else ordered[-self._top:]
        self._iterations = self._iterations + 1 if self.has_plateaued() else 0
        return self.stop_all()

    def has_plateaued(self) -> bool:
        """Whether the top values have (currently) plateaued."""
        return len(self._top_values) == self._top and \
            _std(self._top_values) <= self._std

    def stop_all(self) -> bool:
        return self.has_plateaued() and self._iterations >= self._patience


class TimeoutStopper(Stopper):
    """Stops every trial once ``timeout`` has passed, counted from the first check (so a
    stopper built long before ``fit()`` does not start early).

    Args:
        timeout: Seconds, or a ``datetime.timedelta``.
    """

    def __init__(self, timeout: Union[int, float, datetime.timedelta]) -> None:
        if isinstance(timeout, datetime.timedelta):
            seconds = timeout.total_seconds()
        elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
            seconds = float(timeout)
        else:
            raise ConfigError(f"TimeoutStopper(timeout={timeout!r}) must be seconds (a "
                              "number) or a datetime.timedelta.")
        if seconds <= 0:
            raise ConfigError(f"TimeoutStopper(timeout={timeout!r}) must be > 0.")
        self._timeout_seconds = seconds
        self._budget = seconds
        self._last_check: Optional[float] = None

    def __call__(self, trial_id: str, result: Result) -> bool:
        return False

    def stop_all(self) -> bool:
        now = time.monotonic()
        if self._last_check is not None:
            self._budget -= now - self._last_check
        self._last_check = now
        if self._budget <= 0:
            logger.info("TimeoutStopper: %ss reached; stopping.", self._timeout_seconds)
            return True
        return False

    def __getstate__(self) -> Dict[str, Any]:
        # A restored experiment goes on with the budget left, not the time since then.
        return dict(self.__dict__, _last_check=None)


class CombinedStopper(Stopper):
    """Stops when any of ``stoppers`` does (checked in order, stopping at the first).

    Args:
        *stoppers: The stoppers to combine.
    """

    def __init__(self, *stoppers: Stopper) -> None:
        for s in stoppers:
            if not _is_stopper(s):
                raise ConfigError(f"CombinedStopper({s!r}): pass Stopper instances.")
        self._stoppers = stoppers

    def __call__(self, trial_id: str, result: Result) -> bool:
        return any(s(trial_id, result) for s in self._stoppers)

    def stop_all(self) -> bool:
        return any(s.stop_all() for s in self._stoppers)


class DictStopper(Stopper):
    """``{"metric": value}``: a trial stops when any metric reaches (>=) its value.
    Nested metrics are named with ``/`` (``"val/acc"``)."""

    def __init__(self, criteria: Dict[str, Any]) -> None:
        self.criteria = dict(criteria)
        self._checked: set = set()

    def __call__(self, trial_id: str, result: Result) -> bool:
        if trial_id not in self._checked:
            missing = [k for k in self.criteria if lookup(result, k, _MISSING) is _MISSING]
            if missing:
                shown = sorted(k for k in result if k != "config")
                raise StopperError(
                    f"RunConfig(stop={self.criteria!r}): {missing} not in the reported "
                    f"metrics ({shown}); stop on a metric that report() sends or on "
                    "'training_iteration'.")
            self._checked.add(trial_id)
        for key, limit in self.criteria.items():
            value = lookup(result, key, _MISSING)
            if value is not _MISSING and value is not None and value >= limit:
                return True
        return False

    def __repr__(self) -> str:
        return f"{self.criteria!r}"


_MISSING = object()


def _std(values: List[Any]) -> float:
    try:
        return statistics.pstdev(float(v) for v in values)
    except (TypeError, ValueError):  # a missing (None) or non-numeric value: no plateau
        return math.inf


def _is_stopper(obj: Any) -> bool:
    return callable(obj) and callable(getattr(obj, "stop_all", None))


def make_stopper(stop: Any) -> Optional[Stopper]:
    """The stopper of ``RunConfig(stop=...)``; None when there is none."""
    if stop is None or (isinstance(stop, dict) and not stop):
        return None
    if isinstance(stop, dict):
        return DictStopper(stop)
    if _is_stopper(stop):
        return stop
    if callable(stop):
        return FunctionStopper(stop)
    raise ConfigError(f"RunConfig(stop={stop!r}) must be a dict, a function "
                      "f(trial_id, result) -> bool or a Stopper.")


class StopCheck:
    """Applies a stopper, failing the run (with the stopper named) when it raises."""

    def __init__(self, stopper: Stopper) -> None:
        self.stopper = stopper

    def trial(self, trial_id: str, result: Result) -> bool:
        """Whether this trial stops; also True when ``stop_all`` says so."""
        return self._guard(lambda: bool(self.stopper(trial_id, result))) or self.all()

    def all(self) -> bool:
        return self._guard(lambda: bool(self.stopper.stop_all()))

    def _guard(self, fn: Callable[[], bool]) -> bool:
        try:
            return fn()
        except StopperError:
            raise
        except Exception as exc:
            raise StopperError(
                f"The stopping criterion {self.stopper!r} (RunConfig(stop=...)) raised "
                f"{type(exc).__name__}: {exc}") from exc


def stop_hook(stop: Any, trial_id: Callable[[], str]
              ) -> Optional[Callable[[Optional[Result]], Optional[TrialDecision]]]:
    """A controller ``decide`` hook for a single ``fit()``: STOP when ``stop`` says so
    (after a round, or once per poll for ``stop_all``, e.g. a timeout)."""
    stopper = make_stopper(stop)
    if stopper is None:
        return None
    check = StopCheck(stopper)

    def decide(metrics: Optional[Result]) -> Optional[TrialDecision]:
        stop_now = check.all() if metrics is None else check.trial(trial_id(), metrics)
        return TrialDecision(TrialAction.STOP) if stop_now else None

    return decide
