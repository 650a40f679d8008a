"""Taking back the trials of a saved experiment (``Tuner.restore``).

A finished trial keeps the result its run record holds; an unfinished one (and, with
``resume_errored``, a failed one) is queued again and continues from its latest
committed checkpoint; ``restart_errored`` trials start over from nothing.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from engine import constants
from engine._internal.execution import trial as _trial
from engine._internal.execution.controller import RunState
from engine._internal.run_state.record import RunRecord
from engine._internal.storage import filesystem as _storage
from engine.exceptions import TrainingFailedError
from engine.result import Result
from engine.tune._loop_view import LoopView, RunView

PAUSED = "PAUSED"


def restore_trials(loop: LoopView, trials: List[Dict[str, Any]], *,
                   resume_unfinished: bool, resume_errored: bool,
                   restart_errored: bool) -> None:
    """Rebuild ``loop``'s runs from the saved ``trials`` and queue those that go on."""
    for saved in trials:
        run = loop.new_run(saved["index"], saved["trial_id"], saved["config"],
                           restored=saved)
        loop.runs.append(run)
        loop.scheduler.on_trial_add(run.trial)
        status = saved["status"]
        state = record_state(run)
        if state == RunState.FINISHED.value:
            loop.finish_run(run, stored_result(loop, run, None), notify=False)
            loop.scheduler.on_trial_complete(run.trial, run.result.metrics)
        elif status == _trial.ERROR and not (resume_errored or restart_errored):
            error = TrainingFailedError(saved.get("error") or "the trial failed")
            loop.finish_run(run, stored_result(loop, run, error), notify=False)
        elif status == _trial.ERROR and restart_errored:
            run.trial.storage.delete_dir(run.trial.storage.root)
            loop.requeue(run)
        elif status != _trial.ERROR and not resume_unfinished and state is not None:
            run.trial.status = PAUSED
            loop.finish_run(run, stored_result(loop, run, None), notify=False)
        else:
            loop.requeue(run)


def record_state(run: RunView) -> Optional[str]:
    """The state in the trial's run record, None when it never started."""
    st = run.trial.storage
    data = st.read_json(_storage.join(st.root, constants.RUN_STATE_FILE))
    return None if data is None else data.get("state")


def stored_result(loop: LoopView, run: RunView,
                  error: Optional[BaseException]) -> Result:
    """The Result a trial's run record holds, without running anything."""
    spec = loop.spec_of(run)
    record = RunRecord(run.trial.storage, run.dirname)
    return record.stored_result(spec.run_config.checkpoint_config,
                                spec.train_loop_config, error)
