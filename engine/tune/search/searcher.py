"""The searcher interface (Ray Tune's ``ray.tune.search.searcher.Searcher``)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from engine.exceptions import ConfigError


class Searcher:
    """Suggests configs and learns from finished trials.

    Subclasses implement :meth:`suggest`; the tuner calls :meth:`set_search_properties`
    once, then ``suggest`` for each new trial and :meth:`on_trial_complete` when a trial
    ends.
    """

    # ``suggest`` returns FINISHED when the search is over, None for "not now" (e.g.
    # ConcurrencyLimiter at its limit; the loop asks again when a trial ends, and takes
    # None as FINISHED when no trial is left that could change the answer).
    FINISHED = "FINISHED"
    metric: Optional[str] = None
    mode: Optional[str] = None

    def set_search_properties(self, metric: Optional[str], mode: Optional[str],
                              param_space: Dict[str, Any], num_samples: int,
                              seed: Optional[int]) -> None:
        self.metric = self.metric or metric
        self.mode = self.mode or mode

    def _require_metric(self) -> None:
        """For a searcher that learns from results: both set here or in TuneConfig."""
        if self.metric is None or self.mode is None:
            name = type(self).__name__
            raise ConfigError(f"{name} needs a metric and a mode: set TuneConfig(metric=..., "
                              f"mode='min'|'max') or {name}(metric=..., mode=...).")

    def suggest(self, trial_id: str) -> Optional[Any]:
        """A config for a new trial, :attr:`FINISHED` when the search is over, or None
        for "not now"."""
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: Dict[str, Any]) -> None:
        """After each report of a trial (optional)."""

    def on_trial_complete(self, trial_id: str, result: Optional[Dict[str, Any]] = None,
                          error: bool = False) -> None:
        """When a trial ended (``error`` when it failed)."""

    @property
    def total_trials(self) -> Optional[int]:
        """How many trials this searcher will suggest in all, when it knows."""
        return None


class _WrappedSearcher(Searcher):
    """A searcher around another one (``ConcurrencyLimiter``, ``Repeater``): the metric
    and mode are the inner searcher's, and it takes the tuner's search properties."""

    searcher: Searcher

    @property
    def metric(self) -> Optional[str]:  # type: ignore[override]
        return self.searcher.metric

    @property
    def mode(self) -> Optional[str]:  # type: ignore[override]
        return self.searcher.mode

    def set_search_properties(self, metric: Optional[str], mode: Optional[str],
                              param_space: Dict[str, Any], num_samples: int,
                              seed: Optional[int]) -> None:
        self.searcher.set_search_properties(metric, mode, param_space, num_samples, seed)


__all__ = ["Searcher"]
