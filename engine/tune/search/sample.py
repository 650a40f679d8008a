"""Search-space domains and sampling helpers (Ray Tune's ``ray.tune.search.sample``):
``uniform(0, 1)``, ``choice([...])`` …, ``sample_from(fn)`` and ``grid_search([...])``."""

from __future__ import annotations

import copy
import inspect
import math
import random
from typing import Any, Dict, List, Optional, Sequence

from engine.exceptions import ConfigError


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


GRID_KEY = "grid_search"


def grid_search(values: Sequence[Any]) -> Dict[str, List[Any]]:
    """Try every one of ``values`` (each combination of grids, ``num_samples`` times)."""
    values = list(values)
    if not values:
        raise ConfigError("grid_search([...]) needs at least one value.")
    return {GRID_KEY: values}


# --- walking a param_space ---------------------------------------------------------------
def is_grid(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and GRID_KEY in value
