"""Ray Data's preprocessors under trainyard's prefix (``ray.data.preprocessors`` →
``engine.data.preprocessors``): ``OneHotEncoder``, ``OrdinalEncoder``, ``LabelEncoder``,
``SimpleImputer``, ``Concatenator``, ``StandardScaler``, ``Chain`` … Any trainer's
``preprocessor=`` takes them (see ``engine.preprocessors.RayDataPreprocessor``)."""

from __future__ import annotations

from typing import Any, List

import ray.data.preprocessors as _ray_preprocessors
from ray.data.preprocessors import *  # noqa: F401,F403 - the same names as Ray's


def __getattr__(name: str) -> Any:
    return getattr(_ray_preprocessors, name)


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(dir(_ray_preprocessors)))
