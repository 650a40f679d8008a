"""Walking a ``param_space``: its leaves by path, and a config resolved from the grid's
values and fresh samples (Ray Tune's ``ray.tune.search.variant_generator``)."""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any, Dict, Iterator, List, Tuple

from engine.tune.search.sample import GRID_KEY, Domain, Function, is_grid


Path = Tuple[str, ...]


def leaves(space: Any, prefix: Path = ()) -> Iterator[Tuple[Path, Any]]:
    """Every ``(path, leaf)`` of a nested dict; grids and domains are leaves."""
    if isinstance(space, dict) and not is_grid(space):
        for key, value in space.items():
            yield from leaves(value, prefix + (str(key),))
    else:
        yield prefix, space


def set_path(config: Dict[str, Any], path: Path, value: Any) -> None:
    node = config
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def get_path(config: Dict[str, Any], path: Path, default: Any = None) -> Any:
    node: Any = config
    for key in path:
        if hasattr(node, "__dataclass_fields__") and key in node.__dataclass_fields__:
            node = getattr(node, key)  # a config object the Tuner rebuilt (ScalingConfig)
            continue
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def path_name(path: Path) -> str:
    return "/".join(path)


def searchable_paths(space: Dict[str, Any]) -> List[Path]:
    """Paths of the leaves that vary (grids and domains), for tables and tags."""
    return [p for p, v in leaves(space) if is_grid(v) or isinstance(v, Domain)]


def resolve(space: Dict[str, Any], grid_values: Dict[Path, Any], rng: random.Random
            ) -> Dict[str, Any]:
    """A concrete config: grids take ``grid_values``, domains are sampled, constants copied."""
    config: Dict[str, Any] = {}
    functions: List[Tuple[Path, Function]] = []
    for path, value in leaves(space):
        if not path:
            continue
        if is_grid(value):
            value = grid_values[path]
        elif isinstance(value, Function):  # after the others: it may read them
            functions.append((path, value))
            continue
        elif isinstance(value, Domain):
            value = value.sample(rng)
        else:
            value = copy.deepcopy(value)
        set_path(config, path, value)
    for path, func in functions:
        set_path(config, path, func.resolve(config))
    return config


def grid_combinations(space: Dict[str, Any]) -> List[Dict[Path, Any]]:
    grids = [(p, v[GRID_KEY]) for p, v in leaves(space) if is_grid(v)]
    if not grids:
        return [{}]
    paths = [p for p, _ in grids]
    return [dict(zip(paths, combo)) for combo in itertools.product(*(v for _, v in grids))]
