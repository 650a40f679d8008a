"""Ray Data under trainyard's prefix, for scripts ported by rewriting imports:
``ray.data`` → ``engine.data`` (``engine.data.read_csv``, ``engine.data.Dataset`` …) and
``ray.data.preprocessors`` → ``engine.data.preprocessors``.

These are Ray Data's own objects: datasets created here go to any trainer's
``datasets=``, and Ray Data's preprocessors to its ``preprocessor=``. Importing this
module imports Ray Data (``import engine`` does not).
"""

from __future__ import annotations

from typing import Any, List

import ray.data as _ray_data
from ray.data import *  # noqa: F401,F403 - the same names as ray.data


def __getattr__(name: str) -> Any:
    return getattr(_ray_data, name)


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(dir(_ray_data)))
