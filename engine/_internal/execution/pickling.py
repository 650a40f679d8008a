"""Checking, before anything starts, that what must travel to the workers pickles."""

from __future__ import annotations

import inspect
from typing import Any, Iterator, Optional, Tuple

from engine.exceptions import ConfigError


def check_picklable(obj: Any, what: str) -> None:
    """Raise :class:`ConfigError` when ``obj`` cannot be pickled with cloudpickle (what
    Ray ships functions with), naming the captured object that fails.

    Raises:
        ConfigError: e.g. "train_loop_per_worker 'f' cannot be pickled to ship to the
            workers: it captures `lock` (a _thread.lock) ...".
    """
    import ray.cloudpickle as cloudpickle

    try:
        cloudpickle.dumps(obj)
        return
    except Exception as exc:  # noqa: BLE001 - any pickling failure is the user's to fix
        error = exc
    culprit = _find_culprit(obj, cloudpickle)
    name = getattr(obj, "__name__", type(obj).__name__)
    if culprit is not None:
        var, value = culprit
        found = f"it captures `{var}` (a {type(value).__module__}.{type(value).__qualname__})"
    else:
        found = f"{type(error).__name__}: {error}"
    raise ConfigError(
        f"{what} {name!r} cannot be pickled to ship to the workers: {found}. Create such "
        "objects inside the function (or pass plain values through its config) instead of "
        "capturing them from the enclosing scope or module.") from error


def _captured(fn: Any) -> Iterator[Tuple[str, Any]]:
    """The variables a function closes over, then the module globals it uses."""
    if not inspect.isfunction(fn):
        return
    try:
        cv = inspect.getclosurevars(fn)
    except (TypeError, ValueError):
        return
    yield from cv.nonlocals.items()
    yield from cv.globals.items()


def _find_culprit(obj: Any, cloudpickle: Any, depth: int = 0) -> Optional[Tuple[str, Any]]:
    for var, value in _captured(obj):
        if inspect.ismodule(value):
            continue
        try:
            cloudpickle.dumps(value)
        except Exception:  # noqa: BLE001
            inner = _find_culprit(value, cloudpickle, depth + 1) if depth < 3 else None
            return inner or (var, value)
    return None
