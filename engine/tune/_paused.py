"""Trials a scheduler paused (HyperBand at a milestone, synchronous PBT at a
perturbation point): they end resumable and free their resources; the scheduler's later
decision about each (``TrialScheduler.pop_paused_decisions``) resumes it, stops it, or
resumes it from another trial's checkpoint with a new config (an exploit).

A decision that arrives while the trial is still running (its pause waits for its next
report, so that a final report is never paused) is taken by the pause itself.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from engine._internal.execution import trial as _trial
from engine._internal.execution.controller import TrialAction, TrialDecision
from engine.tune._loop_view import LoopView, RunView
from engine.tune._restore import PAUSED
from engine.tune.schedulers import Exploit, TrialScheduler


logger = logging.getLogger("engine")


class PausedTrials:
    """The loop's scheduler decisions about paused trials, by trial id."""

    def __init__(self, loop: LoopView) -> None:
        self.loop = loop
        self.decisions: Dict[str, Any] = {}

    def take(self) -> None:
        """Collect the scheduler's new decisions (call under the loop's lock)."""
        self.decisions.update(self.loop.scheduler.pop_paused_decisions())

    def on_pause_due(self, run: RunView, metrics: Dict[str, Any]
                     ) -> Optional[TrialDecision]:
        """The trial reported after the round the scheduler paused it at: pause it now,
        unless the scheduler decided about it meanwhile."""
        loop = self.loop
        with loop._lock:
            self.take()
            decision = self.decisions.pop(run.trial.trial_id, None)
            if decision is None:
                run.paused = True
                return TrialDecision(TrialAction.PAUSE)
        if isinstance(decision, Exploit):
            return loop._exploit(run, decision, metrics)
        if decision == TrialScheduler.STOP:
            return TrialDecision(TrialAction.STOP)
        return None  # resumed before it paused: it goes on

    def waiting(self) -> List[RunView]:
        loop = self.loop
        return [r for r in loop.runs if r.trial.status == PAUSED and r.paused
                and r not in loop._pending and r not in loop._running]

    def apply(self) -> None:
        """Carry out the decisions about trials that are paused now (main thread)."""
        loop = self.loop
        with loop._lock:
            self.take()
            for run in self.waiting():
                decision = self.decisions.pop(run.trial.trial_id, None)
                if decision is not None:
                    self._apply(run, decision)
            live = {r.trial.trial_id for r in loop.runs if r.trial.status in
                    (_trial.PENDING, _trial.RUNNING, PAUSED)}
            self.decisions = {k: v for k, v in self.decisions.items() if k in live}

    def release(self) -> None:
        """Nothing runs and no new trial can start: let the scheduler decide about the
        paused trials with what it knows; resume them all if it still does not."""
        waiting = self.waiting()
        if not waiting:
            return
        with self.loop._lock:
            self.loop.scheduler.release_waiting()
        self.apply()
        if any(r in self.loop._pending or r.trial.status != PAUSED for r in waiting):
            return
        logger.warning("%s left %d paused trial(s) waiting with nothing running; resuming "
                       "them.", type(self.loop.scheduler).__name__, len(waiting))
        for run in waiting:
            self._resume(run)

    def _apply(self, run: RunView, decision: Any) -> None:
        if decision == TrialScheduler.STOP:
            run.paused = False
            assert run.result is not None
            run.result.metrics["done"] = True
            self.loop.finish_run(run, run.result)
            self.loop._save()
        elif isinstance(decision, Exploit):
            self._resume(run, decision)
        else:
            self._resume(run)

    def _resume(self, run: RunView, exploit: Optional[Exploit] = None) -> None:
        spec = self.loop.spec_of(run)
        if exploit is not None:
            metrics = dict(run.trial.last_result or {})
            taken = self.loop.take_exploit(run, exploit, metrics)
            if taken is not None:
                ckpt, train_config = taken
                spec.adopt_checkpoint = ckpt
                spec.train_loop_config = train_config
                spec.trial_info["experiment_tag"] = run.trial.experiment_tag
        run.paused = False
        self.loop.requeue(run)
