"""``Repeater`` (Ray Tune's ``ray.tune.search.Repeater``): every suggested config runs
``repeat`` times, and the searcher learns from the mean of the repeats."""

from __future__ import annotations

import copy
import logging
import math
import statistics
from typing import Any, Dict, List, Optional

from engine.exceptions import ConfigError
from engine.tune.search.searcher import Searcher, _WrappedSearcher

logger = logging.getLogger("engine")
TRIAL_INDEX = "__trial_index__"


class _Group:
    def __init__(self, primary: str, config: Dict[str, Any], size: int) -> None:
        self.primary, self.config, self.size = primary, config, size
        self.trial_ids: List[str] = [primary]
        self.scores: Dict[str, float] = {}
        self.errors = 0

    @property
    def full(self) -> bool:
        return len(self.trial_ids) >= self.size

    @property
    def done(self) -> bool:
        return len(self.scores) + self.errors >= self.size


class Repeater(_WrappedSearcher):
    """Runs each config of ``searcher`` ``repeat`` times (e.g. over random seeds) and
    reports the mean of their ``metric`` back to it once all repeats ended.

    Args:
        searcher: The searcher whose configs are repeated.
        repeat: Trials per config (``num_samples`` should be a multiple of it).
        set_index: Add ``config["__trial_index__"]`` (0 … repeat-1) to each repeat.
    """

    def __init__(self, searcher: Searcher, repeat: int = 1, set_index: bool = True) -> None:
        if not isinstance(searcher, Searcher):
            raise ConfigError(f"Repeater(searcher={searcher!r}) needs a Searcher such as "
                              "HyperOptSearch().")
        if not isinstance(repeat, int) or repeat < 1:
            raise ConfigError(f"Repeater(repeat={repeat!r}) must be an integer >= 1.")
        self.searcher, self.repeat, self.set_index = searcher, repeat, set_index
        self._current: Optional[_Group] = None
        self._groups: Dict[str, _Group] = {}

    def set_search_properties(self, metric, mode, param_space, num_samples, seed) -> None:
        if num_samples % self.repeat:
            logger.warning("Repeater(repeat=%d): num_samples=%d is not a multiple of it; "
                           "the last config runs fewer times and its mean is never "
                           "reported.", self.repeat, num_samples)
        super().set_search_properties(metric, mode, param_space, num_samples, seed)

    def suggest(self, trial_id: str) -> Optional[Any]:
        if self._current is None or self._current.full:
            config = self.searcher.suggest(trial_id)
            if config is None or config == Searcher.FINISHED:
                return config
            self._current = _Group(trial_id, copy.deepcopy(config), self.repeat)
        else:
            self._current.trial_ids.append(trial_id)
        group = self._current
        self._groups[trial_id] = group
        config = copy.deepcopy(group.config)
        if self.set_index:
            config[TRIAL_INDEX] = len(group.trial_ids) - 1
        return config

    def on_trial_complete(self, trial_id: str, result: Optional[Dict[str, Any]] = None,
                          error: bool = False) -> None:
        group = self._groups.get(trial_id)
        if group is None:
            return
        value = (result or {}).get(self.metric) if self.metric else None
        if error or not isinstance(value, (int, float)) or math.isnan(float(value)):
            group.errors += 1
        else:
            group.scores[trial_id] = float(value)
        if not group.done:
            return
        if group.scores:
            mean = statistics.fmean(group.scores.values())
            self.searcher.on_trial_complete(group.primary, {self.metric: mean})
        else:
            self.searcher.on_trial_complete(group.primary, None, error=True)


__all__ = ["Repeater", "TRIAL_INDEX"]
