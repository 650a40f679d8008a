"""The default searcher: every combination of the grid ``num_samples`` times, fresh random
values for the sampled leaves each time (Ray Tune's ``ray.tune.search.basic_variant``)."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional

from engine.tune.search.searcher import Searcher
from engine.tune.search.variant_generator import Path, grid_combinations, resolve


# --- searchers -------------------------------------------------------------------------
class BasicVariantGenerator(Searcher):
    """The default: every grid combination ``num_samples`` times, random leaves sampled.

    Args:
        seed: Seed of the random draws (``TuneConfig(seed=...)`` when not given).
    """

    def __init__(self, seed: Optional[int] = None) -> None:
        self.seed = seed
        self._space: Dict[str, Any] = {}
        self._combos: List[Dict[Path, Any]] = [{}]
        self._num_samples = 1
        self._next = 0
        self._rng = random.Random(seed)

    def set_search_properties(self, metric, mode, param_space, num_samples, seed) -> None:
        super().set_search_properties(metric, mode, param_space, num_samples, seed)
        self._space = param_space
        self._combos = grid_combinations(param_space)
        self._num_samples = num_samples
        if self.seed is None:
            self.seed = seed
            self._rng = random.Random(seed)

    @property
    def total_trials(self) -> int:
        return self._num_samples * len(self._combos)

    def suggest(self, trial_id: str) -> Optional[Dict[str, Any]]:
        if self._next >= self.total_trials:
            return None
        combo = self._combos[self._next % len(self._combos)]
        self._next += 1
        return resolve(self._space, combo, self._rng)
