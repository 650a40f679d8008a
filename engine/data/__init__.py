"""Ray Data under trainyard's prefix, for scripts ported by rewriting imports:
``ray.data`` → ``engine.data`` (``engine.data.read_csv``, ``engine.data.Dataset`` …) and
``ray.data.preprocessors`` → ``engine.data.preprocessors``.

These are Ray Data's own objects: datasets created here go to any trainer's
``datasets=``, and Ray Data's preprocessors to its ``preprocessor=``. Importing this
module imports Ray Data (``import engine`` does not).

A dataset created before any ``fit()`` starts Ray as ``fit()`` would
(``engine._internal.ray_runtime.start.ensure_ray``: at least
``DEFAULT_MIN_RAY_NUM_CPUS`` logical CPUs, or joining ``$RAY_ADDRESS``), not with
one CPU per core as Ray Data's own ``ray.init()`` does: on a small machine a trainer
asking for ``resources_per_worker={"CPU": 2}`` on two workers still fits. A Ray the
script started itself (``ray.init(...)``) is left as it is.
"""

from __future__ import annotations

from typing import Any, List

import ray
import ray.data as _ray_data
from ray._private import auto_init_hook as _auto_init_hook
from ray.data import *  # noqa: F401,F403 - the same names as ray.data


def _auto_init_ray() -> None:  # runs with ray._private.auto_init_hook's globals
    """Ray's implicit start (``ray._private.auto_init_hook.auto_init_ray``, which Ray
    Data's APIs call first), done trainyard's way."""
    if enable_auto_connect and not ray.is_initialized():  # noqa: F821 - the hook's names
        from engine._internal.ray_runtime.start import ensure_ray

        ensure_ray()


def _start_ray_as_fit_does() -> None:
    """Give Ray's hook :func:`_auto_init_ray`'s body. Ray's modules import the hook by
    name (``from ray._private.auto_init_hook import auto_init_ray``), so the function
    object they hold is changed, not the module's attribute. A Ray whose hook is not
    the one this was written for keeps its own."""
    hook = _auto_init_hook.auto_init_ray
    names = set(hook.__code__.co_names)
    if getattr(hook, "_trainyard", False) or hook.__code__.co_freevars \
            or not {"enable_auto_connect", "is_initialized", "init"} <= names \
            or not {"ray", "enable_auto_connect"} <= set(hook.__globals__):
        return
    hook.__code__ = _auto_init_ray.__code__
    hook._trainyard = True  # type: ignore[attr-defined]


_start_ray_as_fit_does()


def __getattr__(name: str) -> Any:
    return getattr(_ray_data, name)


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(dir(_ray_data)))
