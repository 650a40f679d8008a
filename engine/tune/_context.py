"""``engine.tune.get_context()``: the trial's context, or Ray Tune's stand-in outside a
trial."""

from __future__ import annotations

from typing import Any


def get_context() -> Any:
    """The trial's context (``engine.get_context()``) inside a trial; outside one, as in
    Ray Tune, a context whose trial id, name and directory and experiment name are None
    (rank 0 of a world of one), rather than an error."""
    from engine._internal.worker_group import session as _session

    if _session._session is not None:
        return _session._session.context
    return _OutsideTrial()


class _OutsideTrial:
    """``tune.get_context()`` outside a trial."""

    def get_world_rank(self) -> int:
        return 0

    def get_local_rank(self) -> int:
        return 0

    def get_world_size(self) -> int:
        return 1

    def get_local_world_size(self) -> int:
        return 1

    def get_node_rank(self) -> int:
        return 0

    def get_trial_id(self) -> None:
        return None

    def get_trial_name(self) -> None:
        return None

    def get_trial_dir(self) -> None:
        return None

    def get_experiment_name(self) -> None:
        return None

    def get_trial_resources(self) -> None:
        return None

    def __repr__(self) -> str:
        return "TuneContext(outside a trial)"

