"""Synchronous HyperBand (Li et al., 2016) as Ray Tune runs it, on the loop's pause.

Trials fill brackets one after the other. A band holds brackets ``s = 0 … s_max``
(``s_max + 1 = round(log(max_t) / log(eta)) + 1``); bracket ``s`` takes
``ceil((s_max + 1) / (s + 1) · eta^s)`` trials and runs them to
``r = max_t · eta^-s``. A trial that reaches its bracket's milestone pauses until every
live trial of the bracket has (and the bracket is full, or no trial can join it any
more); then the best ``ceil(n / eta)`` go on to ``r · eta`` and the others stop, ``s``
times. The last milestone is ``max_t``, where the bracket's trials stop.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from engine.exceptions import ConfigError
from engine.tune.schedulers.trial_scheduler import Decision, TrialScheduler


class Bracket:
    """One bracket: its trials' latest times and scores, and its current milestone."""

    def __init__(self, n0: int, r0: float, max_t: float, eta: float, s: int,
                 stop_last_trials: bool = True) -> None:
        self.max_trials, self.r, self.max_t, self.eta = n0, r0, max_t, eta
        self.n = n0  # how many go on after the next halving: ceil(n / eta)
        self.halves, self.stop_last_trials = s, stop_last_trials
        self.live: Dict[str, Optional[Tuple[float, Optional[float]]]] = {}
        self.added = 0

    def add(self, trial_id: str) -> None:
        self.live[trial_id] = None
        self.added += 1

    @property
    def filled(self) -> bool:
        return self.added >= self.max_trials

    def update(self, trial_id: str, t: float, score: Optional[float]) -> None:
        self.live[trial_id] = (t, score)

    def continues(self, trial_id: str) -> bool:
        """Whether the trial has not reached the milestone yet."""
        if not self.stop_last_trials and self.halves == 0:
            return True
        stats = self.live.get(trial_id)
        return stats is None or stats[0] < self.r

    def round_done(self) -> bool:
        """Every live trial reached the milestone."""
        return all(s is not None and s[0] >= self.r for s in self.live.values())

    @property
    def finished(self) -> bool:
        return self.stop_last_trials and self.halves == 0 and self.round_done()

    def halve(self) -> Tuple[List[str], List[str]]:
        """Successive halving: (kept, stopped); the milestone moves to ``r · eta``."""
        self.halves -= 1
        self.n = int(math.ceil(self.n / self.eta))
        keep = self.n
        self.r = min(self.r * self.eta, self.max_t)
        ranked = sorted(self.live, key=lambda tid: _rank(self.live[tid]), reverse=True)
        good, bad = ranked[:keep], ranked[keep:]
        for tid in bad:
            del self.live[tid]
        return good, bad


def _rank(stats: Optional[Tuple[float, Optional[float]]]) -> float:
    score = stats[1] if stats is not None else None
    return -math.inf if score is None else score


class HyperBandScheduler(TrialScheduler):
    """Synchronous HyperBand: brackets of trials run to a milestone, pause, and only the
    best ``1/reduction_factor`` of each bracket go on. A paused trial resumes from its
    latest checkpoint: report checkpoints, or it starts over (and is fast-forwarded by
    the bracket).

    Args:
        time_attr: The increasing measure of progress (``training_iteration``).
        metric, mode: Default to the TuneConfig's.
        max_t: The most ``time_attr`` a trial runs.
        reduction_factor: ``eta``: the share kept at each halving is ``1/eta``.
        stop_last_trials: Stop trials at ``max_t`` (False: they run on).
    """

    def __init__(self, time_attr: str = "training_iteration", metric: Optional[str] = None,
                 mode: Optional[str] = None, max_t: float = 81,
                 reduction_factor: float = 3, stop_last_trials: bool = True) -> None:
        super().__init__(metric, mode)
        if max_t <= 0:
            raise ConfigError(f"{type(self).__name__}(max_t={max_t}) must be > 0.")
        if reduction_factor <= 1:
            raise ConfigError(f"{type(self).__name__}(reduction_factor="
                              f"{reduction_factor}) must be > 1.")
        self.time_attr, self.max_t, self.eta = time_attr, max_t, reduction_factor
        self.stop_last_trials = stop_last_trials
        self.s_max_1 = int(round(math.log(max_t) / math.log(reduction_factor))) + 1
        self.bands: List[List[Bracket]] = []
        self._bracket_of: Dict[str, Bracket] = {}
        self._decisions: Dict[str, Decision] = {}
        self.num_stopped = 0

    def set_search_properties(self, metric, mode, seed=None) -> None:
        super().set_search_properties(metric, mode, seed)
        self._require_metric()

    def n0(self, s: int) -> int:
        """Trials in bracket ``s``."""
        return int(math.ceil(self.s_max_1 / (s + 1) * self.eta ** s))

    def r0(self, s: int) -> float:
        """The first milestone of bracket ``s``."""
        return int(self.max_t * self.eta ** (-s))

    def _open_bracket(self) -> Bracket:
        """The bracket a new trial joins: the last one, or the next of the band (a new
        band once the band has all its brackets); too small ones are skipped."""
        band = self.bands[-1] if self.bands else None
        if band and not band[-1].filled:
            return band[-1]
        while True:
            if band is None or len(band) >= self.s_max_1:
                band = []
                self.bands.append(band)
            s = len(band)
            bracket = Bracket(self.n0(s), self.r0(s), self.max_t, self.eta, s,
                              self.stop_last_trials)
            band.append(bracket)
            if bracket.r > 0:
                return bracket
            bracket.added = bracket.max_trials  # too small for max_t: never used

    def on_trial_add(self, trial: Any) -> None:
        if trial.trial_id in self._bracket_of:
            return
        bracket = self._open_bracket()
        bracket.add(trial.trial_id)
        self._bracket_of[trial.trial_id] = bracket

    def on_trial_result(self, trial: Any, result: Dict[str, Any]) -> Decision:
        bracket = self._bracket_of.get(trial.trial_id)
        t = result.get(self.time_attr)
        if bracket is None or trial.trial_id not in bracket.live or t is None:
            return self.CONTINUE
        bracket.update(trial.trial_id, float(t), self._score(result))
        if bracket.continues(trial.trial_id):
            return self.CONTINUE
        self._annotate(result, bracket)
        return self._process(bracket, trial.trial_id, force=False)

    def _annotate(self, result: Dict[str, Any], bracket: Bracket) -> None:
        """HyperBandForBOHB tells the searcher the budget."""

    def _process(self, bracket: Bracket, current: Optional[str], force: bool
                 ) -> Decision:
        """Halve the bracket when its round is done; the current trial's decision, the
        paused trials' decisions for pop_paused_decisions()."""
        if not bracket.round_done() or not (bracket.filled or force) or not bracket.live:
            return self.PAUSE
        if bracket.finished:
            self._decide_all(list(bracket.live), self.STOP)
            bracket.live.clear()
            return self._decisions.pop(current, self.STOP) if current else self.STOP
        good, bad = bracket.halve()
        self.num_stopped += len(bad)
        self._decide_all(bad, self.STOP)
        self._decide_all(good, self.CONTINUE)
        if current is None:
            return self.CONTINUE
        return self._decisions.pop(current)

    def _decide_all(self, trial_ids: List[str], decision: Decision) -> None:
        for tid in trial_ids:
            self._decisions[tid] = decision

    def on_trial_complete(self, trial: Any, result: Optional[Dict[str, Any]]) -> None:
        bracket = self._bracket_of.get(trial.trial_id)
        self._decisions.pop(trial.trial_id, None)
        if bracket is None or trial.trial_id not in bracket.live:
            return
        del bracket.live[trial.trial_id]
        if bracket.live:
            self._process(bracket, None, force=False)

    def pop_paused_decisions(self) -> Dict[str, Decision]:
        out, self._decisions = self._decisions, {}
        return out

    def release_waiting(self) -> None:
        for band in self.bands:
            for bracket in band:
                if bracket.live:
                    self._process(bracket, None, force=True)

    def __getstate__(self) -> Dict[str, Any]:
        return dict(self.__dict__)
