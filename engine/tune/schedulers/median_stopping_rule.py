"""Stopping a trial whose best result is below the median of the others' running means at
the same point (Ray Tune's ``ray.tune.schedulers.median_stopping_rule``)."""

from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List, Optional, Sequence, Tuple

from engine.tune.schedulers.trial_scheduler import Decision, TrialScheduler


def percentile(values: Sequence[float], q: float) -> float:
    vals = sorted(v for v in values if not math.isnan(v))
    if not vals:
        return -math.inf
    pos = (len(vals) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    if math.isinf(vals[lo]) or math.isinf(vals[hi]):
        return vals[lo] if pos - lo < 0.5 else vals[hi]
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


class MedianStoppingRule(TrialScheduler):
    """Stop a trial whose best result so far is worse than the median of the other
    trials' running averages at the same point.

    Args:
        time_attr: The measure of progress (``time_total_s``; ``training_iteration``
            makes decisions independent of machine speed).
        metric, mode: Default to the TuneConfig's.
        grace_period: No decision before this ``time_attr``.
        min_samples_required: Other trials that must have reached this point.
        hard_stop: Stop the trial (True), or only log (False).
    """

    def __init__(self, time_attr: str = "time_total_s", metric: Optional[str] = None,
                 mode: Optional[str] = None, grace_period: float = 60.0,
                 min_samples_required: int = 3, hard_stop: bool = True) -> None:
        super().__init__(metric, mode)
        self.time_attr = time_attr
        self.grace_period = grace_period
        self.min_samples_required = min_samples_required
        self.hard_stop = hard_stop
        self._results: Dict[str, List[Tuple[float, float]]] = {}
        self._stopped: set = set()

    def set_search_properties(self, metric, mode, seed=None) -> None:
        super().set_search_properties(metric, mode, seed)
        self._require_metric()

    def on_trial_result(self, trial: Any, result: Dict[str, Any]) -> Decision:
        t, score = result.get(self.time_attr), self._score(result)
        if t is None or score is None:
            return self.CONTINUE
        if trial.trial_id in self._stopped:
            return self.STOP
        self._results.setdefault(trial.trial_id, []).append((float(t), score))
        if t < self.grace_period:
            return self.CONTINUE
        others = [tid for tid, rows in self._results.items()
                  if tid != trial.trial_id and rows[-1][0] >= t]
        if len(others) < self.min_samples_required:
            return self.CONTINUE
        median = statistics.median(self._running_mean(tid, t) for tid in others)
        best = max(s for _, s in self._results[trial.trial_id])
        if best < median and self.hard_stop:
            self._stopped.add(trial.trial_id)
            return self.STOP
        return self.CONTINUE

    def _running_mean(self, trial_id: str, t: float) -> float:
        scoped = [s for u, s in self._results[trial_id] if self.grace_period <= u <= t]
        return statistics.fmean(scoped) if scoped else -math.inf
