"""``ConcurrencyLimiter`` (Ray Tune's ``ray.tune.search.ConcurrencyLimiter``): at most
``max_concurrent`` of a searcher's trials unfinished at once."""

from __future__ import annotations

from typing import Any, Dict, Optional, Set, Tuple

from engine.exceptions import ConfigError
from engine.tune.search.searcher import Searcher, _WrappedSearcher


class ConcurrencyLimiter(_WrappedSearcher):
    """Wraps a searcher so that no more than ``max_concurrent`` of its trials run (or
    wait paused) at once; ``suggest`` says "not now" (None) at the limit.

    Args:
        searcher: The searcher to limit.
        max_concurrent: Most trials unfinished at once (>= 1).
        batch: Hand results to the searcher only in whole batches of
            ``max_concurrent`` (and suggest again only after a whole batch ended).
    """

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False) -> None:
        if not isinstance(searcher, Searcher):
            raise ConfigError(f"ConcurrencyLimiter(searcher={searcher!r}) needs a Searcher "
                              "such as HyperOptSearch().")
        if not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ConfigError(f"ConcurrencyLimiter(max_concurrent={max_concurrent!r}) must "
                              "be an integer >= 1.")
        self.searcher, self.max_concurrent, self.batch = searcher, max_concurrent, batch
        self.live_trials: Set[str] = set()
        self._cached: Dict[str, Tuple[Optional[Dict[str, Any]], bool]] = {}

    @property
    def total_trials(self) -> Optional[int]:
        return self.searcher.total_trials

    def suggest(self, trial_id: str) -> Optional[Any]:
        if len(self.live_trials) >= self.max_concurrent:
            return None
        suggestion = self.searcher.suggest(trial_id)
        if suggestion is not None and suggestion != Searcher.FINISHED:
            self.live_trials.add(trial_id)
        return suggestion

    def on_trial_result(self, trial_id: str, result: Dict[str, Any]) -> None:
        if trial_id in self.live_trials:
            self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: Optional[Dict[str, Any]] = None,
                          error: bool = False) -> None:
        if trial_id not in self.live_trials:
            return
        if not self.batch:
            self.searcher.on_trial_complete(trial_id, result, error=error)
            self.live_trials.discard(trial_id)
            return
        self._cached[trial_id] = (result, error)
        if len(self._cached) >= len(self.live_trials):  # the whole batch ended
            for tid, (res, err) in self._cached.items():
                self.searcher.on_trial_complete(tid, res, error=err)
                self.live_trials.discard(tid)
            self._cached = {}


__all__ = ["ConcurrencyLimiter"]
