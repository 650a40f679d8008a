"""Optional libraries of the model-based searchers: imported when a searcher is set up,
never by ``import engine.tune``; a missing one is an error naming the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Dict, List, Tuple

from engine.exceptions import ConfigError
from engine.tune.search import Domain, Function, Path, is_grid, leaves, path_name


def require(module: str, extra: str, searcher: str) -> ModuleType:
    """``import module``, or an ImportError that says which extra provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{searcher} needs the {module!r} package, which is not installed: "
            f"pip install 'trainyard[{extra}]'.") from exc


def split_space(space: Dict[str, Any], searcher: str
                ) -> Tuple[List[Tuple[Path, Domain]], List[Tuple[Path, Any]]]:
    """The sampled leaves (path, domain) and the constant ones of a param_space.
    Grids and ``sample_from`` cannot be modelled: a ConfigError says what to use."""
    domains: List[Tuple[Path, Domain]] = []
    constants: List[Tuple[Path, Any]] = []
    for path, value in leaves(space):
        if not path:
            continue
        if is_grid(value):
            raise ConfigError(f"{searcher} does not take grid_search (at "
                              f"{path_name(path)!r}): use tune.choice([...]) instead.")
        if isinstance(value, Function):
            raise ConfigError(f"{searcher} cannot model sample_from (at "
                              f"{path_name(path)!r}): use a domain such as tune.uniform.")
        if isinstance(value, Domain):
            domains.append((path, value))
        else:
            constants.append((path, value))
    if not domains:
        raise ConfigError(f"{searcher} found nothing to search: give the param_space (or "
                          f"{searcher}(space=...)) at least one domain such as "
                          "tune.uniform(0, 1).")
    return domains, constants


def flat_point(point: Dict[str, Any]) -> Dict[str, Any]:
    """A points_to_evaluate entry as ``{"a/b": value}`` (nested dicts or paths)."""
    return {path_name(p): v for p, v in leaves(point) if p}


def sign(mode: str) -> float:
    """Multiply a metric by this to get "larger is better"."""
    return 1.0 if mode == "max" else -1.0
