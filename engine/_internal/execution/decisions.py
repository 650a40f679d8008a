"""A tuner's verdicts on a running trial, round by round (``Controller(decide=...)``).

Each complete round goes to the report handler and then to the ``decide`` hook; its
first verdict other than CONTINUE is the controller's to apply. A RESTART with
``prepare`` (PBT never exploits a trial at its final report) is deferred until some rank
reports after its round, and dropped when every rank finished without another report.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from engine._internal.execution.report_handler import ReportHandler, Round
from engine._internal.execution.rounds import RoundTracker
from engine._internal.run_state.spec import TrialAction, TrialDecision
from engine.config import RunConfig

Decide = Callable[[Optional[Dict[str, Any]]], Optional[TrialDecision]]


class RoundDecisions:
    """The rounds of each poll, handled in order, and the ``decide`` hook's verdicts."""

    def __init__(self, decide: Optional[Decide], reports: ReportHandler,
                 run_config: RunConfig, driver_fields: Callable[[], Dict[str, Any]]) -> None:
        self.decide = decide
        self.reports = reports
        self.run_config = run_config  # read each round: metrics_reduce as it is then
        self.driver_fields = driver_fields
        self.last_metrics: Dict[str, Any] = {}
        self._deferred: Optional[Tuple[int, TrialDecision]] = None  # (round, decision)

    def next(self, tracker: RoundTracker) -> Optional[TrialDecision]:
        """The verdict on this poll: a deferred RESTART now due, else the first decision
        on the new rounds, else the hook's once-per-poll check."""
        decision = self.resolve(tracker)
        if decision is None and self._deferred is None:
            decision = self.process(tracker)
        if decision is None and self.decide is not None:
            decision = self.decide(None)
        return decision

    def process(self, tracker: RoundTracker) -> Optional[TrialDecision]:
        """Hand complete rounds to the report handler; with a ``decide`` hook, return its
        first decision other than CONTINUE (later rounds of this poll are dropped with
        the group)."""
        rounds = tracker.pop_complete()
        for n, (iteration, items) in enumerate(rounds):
            rnd = Round.of(iteration, items, self.run_config.metrics_reduce,
                           self.driver_fields())
            self.reports.handle(rnd)
            self.last_metrics = rnd.metrics
            decision = self.decide(rnd.metrics) if self.decide is not None else None
            if decision is None or decision.action is TrialAction.CONTINUE:
                continue
            if decision.prepare is not None:
                # Later rounds go back: processed only if the trial goes on after all.
                tracker.pending.update({i: r for i, r in rounds[n + 1:]})
                self._deferred = (iteration, decision)
                return self.resolve(tracker)
            return decision
        return None

    def resolve(self, tracker: RoundTracker) -> Optional[TrialDecision]:
        """A deferred RESTART: applied once some rank reported after its round (so that
        round was not the last), dropped when every rank finished without another report
        (the run's final report is never exploited); until then, wait."""
        if self._deferred is None:
            return None
        iteration, decision = self._deferred
        if any(i > iteration for i in tracker.pending):
            self._deferred = None
            assert decision.prepare is not None
            return decision.prepare()
        if tracker.all_finished:
            self.cancel()
        return None

    def cancel(self) -> None:
        """Drop a deferred RESTART (the trial stops or fails meanwhile)."""
        if self._deferred is not None:
            decision = self._deferred[1]
            self._deferred = None
            if decision.cancel is not None:
                decision.cancel()
