"""Search spaces inside config objects of a param_space, as in Ray Tune:
``{"scaling_config": ScalingConfig(num_workers=tune.grid_search([1, 2]))}``.

Such an object is opened into a dict of its fields for the searcher (a grid expands, a
domain is sampled like any other leaf), and rebuilt, with the trial's values, into the
trial's config; the rebuilt object validates them as usual.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Tuple

from engine.config import search_markers
from engine.tune.search import Path, get_path, set_path

Classes = Dict[Path, type]


def expand(space: Dict[str, Any], prefix: Path = ()) -> Tuple[Dict[str, Any], Classes]:
    """The param_space with every config object that holds a search space opened into a
    dict, and the class to rebuild at each such path."""
    out: Dict[str, Any] = {}
    classes: Classes = {}
    for key, value in space.items():
        path = prefix + (str(key),)
        if search_markers(value):
            out[key] = {name: copy.copy(getattr(value, name))
                        for name in value.__dataclass_fields__}
            classes[path] = type(value)
        elif isinstance(value, dict) and not _is_grid(value):
            out[key], inner = expand(value, path)
            classes.update(inner)
        else:
            out[key] = value
    return out, classes


def rebuild(config: Dict[str, Any], classes: Classes) -> Dict[str, Any]:
    """A trial's config with the opened objects built again from its values (deepest
    first)."""
    for path in sorted(classes, key=len, reverse=True):
        fields = get_path(config, path)
        if isinstance(fields, dict):
            set_path(config, path, classes[path](**fields))
    return config


def _is_grid(value: Dict[str, Any]) -> bool:
    return len(value) == 1 and "grid_search" in value
