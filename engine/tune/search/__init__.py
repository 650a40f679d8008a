"""Search spaces and the default searcher (grid × random sampling).

A ``param_space`` is a (nested) dict whose leaves are constants, sampling domains
(``uniform(0, 1)``, ``choice([...])`` …) or ``grid_search([...])``. The default searcher
runs every combination of the grid ``num_samples`` times, drawing fresh random values for
the sampled leaves each time.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import math
import random
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from engine.exceptions import ConfigError
from engine.tune.search.searcher import Searcher

Path = Tuple[str, ...]
GRID_KEY = "grid_search"


# --- domains --------------------------------------------------------------------------
class Domain:
    """A distribution to sample one hyperparameter from."""

    _search_space_marker = True  # engine.config.is_search_marker

    def sample(self, rng: random.Random) -> Any:
        raise NotImplementedError


class Categorical(Domain):
    def __init__(self, categories: Sequence[Any]) -> None:
        self.categories = list(categories)
        if not self.categories:
            raise ConfigError("choice([...]) needs at least one category.")

    def sample(self, rng: random.Random) -> Any:
        return copy.deepcopy(self.categories[rng.randrange(len(self.categories))])

    def __repr__(self) -> str:
        return f"choice({self.categories!r})"


class Float(Domain):
    """Uniform (or log-uniform) floats in ``[lower, upper)``, optionally rounded to ``q``."""

    def __init__(self, lower: float, upper: float, log: bool = False,
                 q: Optional[float] = None, base: float = 10.0) -> None:
        if not lower < upper:
            raise ConfigError(f"A float range needs lower < upper, got [{lower}, {upper}).")
        if log and lower <= 0:
            raise ConfigError(f"loguniform({lower}, {upper}) needs lower > 0.")
        if q is not None and q <= 0:
            raise ConfigError(f"quniform(..., q={q}) needs q > 0.")
        self.lower, self.upper, self.log, self.q, self.base = lower, upper, log, q, base

    def sample(self, rng: random.Random) -> float:
        if self.log:
            lo, hi = math.log(self.lower, self.base), math.log(self.upper, self.base)
            value = self.base ** rng.uniform(lo, hi)
        else:
            value = rng.uniform(self.lower, self.upper)
        return self.quantize(value)

    def quantize(self, value: float) -> float:
        if self.q is None:
            return min(max(value, self.lower), self.upper)
        value = round(value / self.q) * self.q
        # Stay inside the range after rounding (and drop float noise like 0.30000000000000004).
        value = min(max(value, math.ceil(self.lower / self.q) * self.q),
                    math.floor(self.upper / self.q) * self.q)
        return float(round(value, 12))

    def __repr__(self) -> str:
        kind = "loguniform" if self.log else ("quniform" if self.q else "uniform")
        extra = f", q={self.q}" if self.q else ""
        return f"{kind}({self.lower}, {self.upper}{extra})"


class Integer(Domain):
    """Integers in ``[lower, upper)`` (upper excluded, as in Ray Tune's ``randint``),
    optionally log-uniform (``lograndint``) and rounded to a multiple of ``q``."""

    def __init__(self, lower: int, upper: int, q: Optional[int] = None, log: bool = False,
                 base: float = 10.0) -> None:
        if not int(lower) < int(upper):
            raise ConfigError(f"randint({lower}, {upper}) needs lower < upper "
                              "(upper is excluded).")
        if log and int(lower) <= 0:
            raise ConfigError(f"lograndint({lower}, {upper}) needs lower > 0.")
        if q is not None and (not isinstance(q, int) or q < 1):
            raise ConfigError(f"qrandint(..., q={q!r}) needs an integer q >= 1.")
        self.lower, self.upper = int(lower), int(upper)
        self.q, self.log, self.base = q, log, base

    def sample(self, rng: random.Random) -> int:
        if self.log:
            lo, hi = math.log(self.lower, self.base), math.log(self.upper, self.base)
            value = min(int(self.base ** rng.uniform(lo, hi)), self.upper - 1)
        else:
            value = rng.randrange(self.lower, self.upper)
        if self.q is None:
            return value
        # Round to a multiple of q that stays inside [lower, upper).
        value = int(round(value / self.q) * self.q)
        low = -(-self.lower // self.q) * self.q
        high = ((self.upper - 1) // self.q) * self.q
        return min(max(value, low), high)

    def __repr__(self) -> str:
        kind = "lograndint" if self.log else "randint"
        extra = f", q={self.q}" if self.q else ""
        return f"{kind}({self.lower}, {self.upper}{extra})"


class Normal(Domain):
    """Normally distributed floats (``randn``), optionally rounded to a multiple of ``q``."""

    def __init__(self, mean: float = 0.0, sd: float = 1.0, q: Optional[float] = None) -> None:
        if sd <= 0:
            raise ConfigError(f"randn(mean={mean}, sd={sd}) needs sd > 0.")
        if q is not None and q <= 0:
            raise ConfigError(f"qrandn(..., q={q}) needs q > 0.")
        self.mean, self.sd, self.q = float(mean), float(sd), q

    def sample(self, rng: random.Random) -> float:
        value = rng.gauss(self.mean, self.sd)
        return value if self.q is None else float(round(round(value / self.q) * self.q, 12))

    def __repr__(self) -> str:
        return f"randn({self.mean}, {self.sd}" + (f", q={self.q})" if self.q else ")")


class Function(Domain):
    """``sample_from(func)``: ``func(spec)`` computes the value from the rest of the
    trial's config (``spec.config.<key>``), or ``func()`` when it takes no argument.
    It runs after every other value of the config was drawn."""

    def __init__(self, func: Any) -> None:
        if not callable(func):
            raise ConfigError(f"sample_from({func!r}) needs a function, e.g. "
                              "sample_from(lambda spec: spec.config.lr * 10).")
        self.func = func
        try:
            inspect.signature(func).bind({})
            self._pass_spec = True
        except (TypeError, ValueError):
            self._pass_spec = False

    def sample(self, rng: random.Random) -> Any:
        return self.func(_Spec({})) if self._pass_spec else self.func()

    def resolve(self, config: Dict[str, Any]) -> Any:
        return self.func(_Spec(config)) if self._pass_spec else self.func()

    def __repr__(self) -> str:
        return f"sample_from({getattr(self.func, '__qualname__', self.func)})"


class _AttrDict(dict):
    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(f"the config has no key {name!r}") from None
        return _AttrDict(value) if isinstance(value, dict) else value


class _Spec:
    """What a ``sample_from`` function sees: ``spec.config`` (attribute or key access)."""

    def __init__(self, config: Dict[str, Any]) -> None:
        self.config = _AttrDict(config)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


def choice(categories: Sequence[Any]) -> Categorical:
    """One of ``categories``, uniformly."""
    return Categorical(categories)


def uniform(lower: float, upper: float) -> Float:
    """A float uniformly in ``[lower, upper)``."""
    return Float(lower, upper)


def quniform(lower: float, upper: float, q: float) -> Float:
    """A float uniformly in ``[lower, upper]``, rounded to a multiple of ``q``."""
    return Float(lower, upper, q=q)


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    """A float whose logarithm is uniform in ``[log(lower), log(upper))``."""
    return Float(lower, upper, log=True, base=base)


def randint(lower: int, upper: int) -> Integer:
    """An integer in ``[lower, upper)``."""
    return Integer(lower, upper)


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """An integer in ``[lower, upper]`` (upper included, as in Ray Tune), rounded to a
    multiple of ``q``."""
    return Integer(lower, upper + 1, q=q)


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    """An integer in ``[lower, upper)`` whose logarithm is uniform."""
    return Integer(lower, upper, log=True, base=base)


def qlograndint(lower: int, upper: int, q: int, base: float = 10) -> Integer:
    """An integer in ``[lower, upper]`` whose logarithm is uniform, rounded to ``q``."""
    return Integer(lower, upper + 1, q=q, log=True, base=base)


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    """A float whose logarithm is uniform, rounded to a multiple of ``q``."""
    return Float(lower, upper, log=True, q=q, base=base)


def randn(mean: float = 0.0, sd: float = 1.0) -> Normal:
    """A normally distributed float."""
    return Normal(mean, sd)


def qrandn(mean: float, sd: float, q: float) -> Normal:
    """A normally distributed float rounded to a multiple of ``q``."""
    return Normal(mean, sd, q)


def sample_from(func: Any) -> Function:
    """A value computed by ``func(spec)`` from the trial's other values
    (``spec.config.<key>``), or by ``func()``."""
    return Function(func)


def grid_search(values: Sequence[Any]) -> Dict[str, List[Any]]:
    """Try every one of ``values`` (each combination of grids, ``num_samples`` times)."""
    values = list(values)
    if not values:
        raise ConfigError("grid_search([...]) needs at least one value.")
    return {GRID_KEY: values}


# --- walking a param_space ---------------------------------------------------------------
def is_grid(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and GRID_KEY in value


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


# --- searchers -------------------------------------------------------------------------
class BasicVariantGenerator(Searcher):
    """The default: every grid combination ``num_samples`` times, random leaves sampled.

    Args:
        seed: Seed of the random draws (``TuneConfig(seed=...)`` when not given).
    """

    def __init__(self, seed: Optional[int] = None) -> None:
        self.seed = seed
        self._space: Dict[str, Any] = {}
        self._combos: List[Dict[Path, Any]] = [{}]
        self._num_samples = 1
        self._next = 0
        self._rng = random.Random(seed)

    def set_search_properties(self, metric, mode, param_space, num_samples, seed) -> None:
        super().set_search_properties(metric, mode, param_space, num_samples, seed)
        self._space = param_space
        self._combos = grid_combinations(param_space)
        self._num_samples = num_samples
        if self.seed is None:
            self.seed = seed
            self._rng = random.Random(seed)

    @property
    def total_trials(self) -> int:
        return self._num_samples * len(self._combos)

    def suggest(self, trial_id: str) -> Optional[Dict[str, Any]]:
        if self._next >= self.total_trials:
            return None
        combo = self._combos[self._next % len(self._combos)]
        self._next += 1
        return resolve(self._space, combo, self._rng)


__all__ = [
    "Domain", "Categorical", "Float", "Integer", "Normal", "Function", "choice", "uniform",
    "quniform", "loguniform", "qloguniform", "randint", "qrandint", "lograndint",
    "qlograndint", "randn", "qrandn", "sample_from", "grid_search", "Searcher",
    "BasicVariantGenerator", "ConcurrencyLimiter", "Repeater",
]

# Wrappers around a searcher (their modules import this one).
from engine.tune.search.concurrency_limiter import ConcurrencyLimiter  # noqa: E402
from engine.tune.search.repeater import Repeater  # noqa: E402
