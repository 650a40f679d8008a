"""Asynchronous successive halving (Ray Tune's ``ray.tune.schedulers.async_hyperband``)."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from engine.exceptions import ConfigError
from engine.tune.schedulers.median_stopping_rule import percentile
from engine.tune.schedulers.trial_scheduler import Decision, TrialScheduler


class ASHAScheduler(TrialScheduler):
    """Asynchronous successive halving: at each rung (``grace_period × rf^k``), a trial
    worse than the top ``1/reduction_factor`` of those that reached the rung stops.

    Args:
        time_attr: The increasing measure of progress (``training_iteration``).
        metric, mode: Default to the TuneConfig's.
        max_t: Trials stop at this ``time_attr``.
        grace_period: The first rung: no trial stops before it.
        reduction_factor: Keep the best ``1/reduction_factor`` at each rung.
        brackets: Number of brackets (each starting its rungs one step later).
        stop_last_trials: Stop trials that reach ``max_t``.
    """

    def __init__(self, time_attr: str = "training_iteration", metric: Optional[str] = None,
                 mode: Optional[str] = None, max_t: float = 100, grace_period: float = 1,
                 reduction_factor: float = 4, brackets: int = 1,
                 stop_last_trials: bool = True) -> None:
        super().__init__(metric, mode)
        if grace_period <= 0 or max_t < grace_period:
            raise ConfigError(f"ASHAScheduler needs 0 < grace_period <= max_t, got "
                              f"grace_period={grace_period}, max_t={max_t}.")
        if reduction_factor <= 1:
            raise ConfigError(f"ASHAScheduler(reduction_factor={reduction_factor}) must be > 1.")
        if brackets < 1:
            raise ConfigError(f"ASHAScheduler(brackets={brackets}) must be >= 1.")
        self.time_attr = time_attr
        self.max_t = max_t
        self.grace_period = grace_period
        self.rf = reduction_factor
        self.stop_last_trials = stop_last_trials
        self._brackets = [_Bracket(grace_period, max_t, reduction_factor, s)
                          for s in range(brackets)]
        self._trial_bracket: Dict[str, _Bracket] = {}

    def set_search_properties(self, metric, mode, seed=None) -> None:
        super().set_search_properties(metric, mode, seed)
        self._require_metric()

    def on_trial_add(self, trial: Any) -> None:
        if trial.trial_id in self._trial_bracket:  # a restored trial
            return
        index = len(self._trial_bracket) % len(self._brackets)
        self._trial_bracket[trial.trial_id] = self._brackets[index]

    def on_trial_result(self, trial: Any, result: Dict[str, Any]) -> Decision:
        t = result.get(self.time_attr)
        if t is None:
            return self.CONTINUE
        if t >= self.max_t and self.stop_last_trials:
            return self.STOP
        bracket = self._trial_bracket.get(trial.trial_id)
        if bracket is None:
            self.on_trial_add(trial)
            bracket = self._trial_bracket[trial.trial_id]
        return bracket.on_result(trial.trial_id, t, self._score(result))

    @property
    def rungs(self) -> List[float]:
        """Milestones of the first bracket, lowest first."""
        return sorted(m for m, _ in self._brackets[0].rungs)


class _Bracket:
    def __init__(self, min_t: float, max_t: float, rf: float, s: int) -> None:
        self.rf = rf
        count = int(math.log(max_t / min_t) / math.log(rf) - s + 1 + 1e-9)
        self.rungs: List[Tuple[float, Dict[str, float]]] = [
            (min_t * rf ** (k + s), {}) for k in reversed(range(max(count, 0)))]

    def cutoff(self, recorded: Dict[str, float]) -> Optional[float]:
        if not recorded:
            return None
        return percentile(list(recorded.values()), (1 - 1 / self.rf) * 100)

    def on_result(self, trial_id: str, t: float, score: Optional[float]) -> str:
        for milestone, recorded in self.rungs:  # highest rung first
            if t < milestone or trial_id in recorded:
                continue
            cutoff = self.cutoff(recorded)
            if score is not None:
                recorded[trial_id] = score
            if cutoff is not None and (score is None or score < cutoff):
                return TrialScheduler.STOP
            break
        return TrialScheduler.CONTINUE


# Ray Tune's longer names.
AsyncHyperBandScheduler = ASHAScheduler
