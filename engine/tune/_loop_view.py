"""What the trial loop's helpers (``_paused``, ``_restore``) use of the loop and of its
trials' bookkeeping, as Protocols. The loop (``engine.tune._loop``) imports the helpers,
so they name it by its shape instead of importing its module: no import cycle, not even
one for the type checker.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Protocol, Tuple

from engine._internal.execution.controller import RunSpec, TrialDecision
from engine._internal.execution.trial import Trial
from engine.checkpoint import Checkpoint
from engine.result import Result
from engine.tune.schedulers import Exploit, TrialScheduler


class RunView(Protocol):
    """``engine.tune._loop.TrialRun`` as the helpers use it."""

    trial: Trial
    index: int
    dirname: str
    result: Optional[Result]
    paused: bool


class LoopView(Protocol):
    """``engine.tune._loop.TrialLoop`` as the helpers use it (its lock and queues too:
    they act under the loop's lock, on its pending and running runs)."""

    scheduler: TrialScheduler
    runs: List[Any]
    _pending: List[Any]
    _running: List[Any]
    _lock: threading.RLock

    def new_run(self, index: int, trial_id: str, config: Dict[str, Any],
                restored: Optional[Dict[str, Any]] = None) -> Any: ...

    def spec_of(self, run: Any) -> RunSpec: ...

    def finish_run(self, run: Any, result: Result, notify: bool = True) -> None: ...

    def requeue(self, run: Any) -> None: ...

    def take_exploit(self, run: Any, exploit: Exploit, metrics: Dict[str, Any]
                     ) -> Optional[Tuple[Checkpoint, Dict[str, Any]]]: ...

    def _exploit(self, run: Any, exploit: Exploit, metrics: Dict[str, Any]
                 ) -> Optional[TrialDecision]: ...

    def _save(self) -> None: ...
