"""``TuneBOHB`` (Ray Tune's ``ray.tune.search.bohb``): BOHB's model-based sampling, to
use with ``HyperBandForBOHB``. The space is a ConfigSpace ``ConfigurationSpace`` (or a
param_space of trainyard domains, converted to one).

Ray Tune wraps hpbandster's BOHB config generator. hpbandster was last released in 2018
and needs Pyro4 and netifaces (no wheels for Python 3.11), so this module implements
the same model (Falkner et al., 2018) on ConfigSpace and numpy: per budget, the
results split into the best ``top_n_percent`` and the rest; a product kernel density
estimate of each is fitted on the largest budget with enough results, and the
candidate (drawn around good configs) with the highest ratio good/bad is suggested; a
``random_fraction`` of the suggestions, and all until a model exists, are random.
(``pip install 'trainyard[bohb]'``)."""

from __future__ import annotations

import copy
import math
from typing import Any, Dict, List, Optional, Tuple

from engine.exceptions import ConfigError
from engine.tune.search import (Categorical, Domain, Float, Integer, Normal, Path, Searcher,
                                path_name, set_path)
from engine.tune.search._bohb_model import KDEModel
from engine.tune.search._libs import flat_point, require, sign, split_space

NAME = "TuneBOHB"


class TuneBOHB(Searcher):
    """BOHB's searcher: model-based suggestions from the results per budget that
    :class:`~engine.tune.schedulers.HyperBandForBOHB` annotates.

    Args:
        space: A ``ConfigSpace.ConfigurationSpace`` or a param_space of domains;
            defaults to the Tuner's param_space.
        bohb_config: The model's settings: ``min_points_in_model`` (default: number of
            parameters + 1), ``top_n_percent`` (15), ``num_samples`` (64),
            ``random_fraction`` (1/3), ``bandwidth_factor`` (3), ``min_bandwidth``
            (1e-3).
        metric, mode: Default to ``TuneConfig(metric, mode)``.
        points_to_evaluate: Configs to try first.
        seed: Seed of the random draws (``TuneConfig(seed=...)`` when not given).
        max_concurrent: Deprecated in Ray Tune; wrap in ``ConcurrencyLimiter``.
    """

    def __init__(self, space: Any = None, bohb_config: Optional[Dict[str, Any]] = None,
                 metric: Optional[str] = None, mode: Optional[str] = None,
                 points_to_evaluate: Optional[List[Dict[str, Any]]] = None,
                 seed: Optional[int] = None, max_concurrent: int = 0) -> None:
        if mode not in (None, "min", "max"):
            raise ConfigError(f"TuneBOHB(mode={mode!r}) must be 'min' or 'max'.")
        known = {"min_points_in_model", "top_n_percent", "num_samples", "random_fraction",
                 "bandwidth_factor", "min_bandwidth"}
        unknown = set(bohb_config or {}) - known
        if unknown:
            raise ConfigError(f"TuneBOHB(bohb_config=...) has unknown keys "
                              f"{sorted(unknown)}; known: {sorted(known)}.")
        if max_concurrent:
            raise ConfigError("TuneBOHB(max_concurrent=...) is gone from Ray Tune too: wrap "
                              "the searcher, ConcurrencyLimiter(TuneBOHB(), max_concurrent).")
        self._space, self.metric, self.mode, self.seed = space, metric, mode, seed
        self._bohb_config = dict(bohb_config or {})
        self._points = [flat_point(p) for p in points_to_evaluate or []]
        self._live: Dict[str, Any] = {}
        self._paths: Dict[str, Path] = {}
        self._domains: Dict[str, Domain] = {}
        self._constants: List[Tuple[Path, Any]] = []

    def set_search_properties(self, metric, mode, param_space, num_samples, seed) -> None:
        super().set_search_properties(metric, mode, param_space, num_samples, seed)
        self._require_metric()
        if self.seed is None:
            self.seed = seed
        self._setup(self._space if self._space is not None else param_space)

    def _setup(self, space: Any) -> None:
        cs_mod = require("ConfigSpace", "bohb", NAME)
        if isinstance(space, cs_mod.ConfigurationSpace):
            self._cs = space
            self._paths = {name: tuple(name.split("/")) for name in space.keys()}
        else:
            domains, self._constants = split_space(space, NAME)
            self._cs = cs_mod.ConfigurationSpace(seed=self.seed)
            for path, domain in domains:
                name = path_name(path)
                self._paths[name], self._domains[name] = path, domain
                self._cs.add(_to_configspace(cs_mod, name, domain))
        self._cs.seed(self.seed if self.seed is not None else 0)
        self._model = KDEModel(self._cs, seed=self.seed, **self._bohb_config)

    def suggest(self, trial_id: str) -> Optional[Dict[str, Any]]:
        if self._points:
            values = self._points.pop(0)
            config = self._cs_config(values)
        else:
            config = self._model.get_config()
        self._live[trial_id] = config
        return self._config(dict(config))

    def _cs_config(self, values: Dict[str, Any]) -> Any:
        import ConfigSpace

        stored = {}
        for name, value in values.items():
            domain = self._domains.get(name)
            stored[name] = domain.categories.index(value) \
                if isinstance(domain, Categorical) else value
        return ConfigSpace.Configuration(self._cs, values=stored)

    def _config(self, values: Dict[str, Any]) -> Dict[str, Any]:
        config: Dict[str, Any] = {}
        for path, value in self._constants:
            set_path(config, path, copy.deepcopy(value))
        for name, value in values.items():
            set_path(config, self._paths[name], _from_configspace(self._domains.get(name),
                                                                  value))
        return config

    def on_trial_result(self, trial_id: str, result: Dict[str, Any]) -> None:
        """A result at a HyperBand milestone goes into the model of its budget."""
        budget = (result.get("hyperband_info") or {}).get("budget")
        value = result.get(self.metric)
        config = self._live.get(trial_id)
        if budget is None or config is None or not isinstance(value, (int, float)) \
                or math.isnan(float(value)):
            return
        self._model.add(config, float(budget), -sign(self.mode) * float(value))

    def on_trial_complete(self, trial_id: str, result: Optional[Dict[str, Any]] = None,
                          error: bool = False) -> None:
        self._live.pop(trial_id, None)


def _to_configspace(cs: Any, name: str, domain: Domain) -> Any:
    if isinstance(domain, Categorical):
        return cs.Categorical(name, list(range(len(domain.categories))))
    if isinstance(domain, Float):
        return cs.Float(name, (domain.lower, domain.upper), log=domain.log)
    if isinstance(domain, Integer):
        return cs.Integer(name, (domain.lower, domain.upper - 1), log=domain.log)
    if isinstance(domain, Normal):
        bounds = (domain.mean - 4 * domain.sd, domain.mean + 4 * domain.sd)
        return cs.Float(name, bounds, distribution=cs.Normal(domain.mean, domain.sd))
    raise ConfigError(f"TuneBOHB cannot model {domain!r} (at {name!r}).")


def _from_configspace(domain: Optional[Domain], value: Any) -> Any:
    if isinstance(domain, Categorical):
        return copy.deepcopy(domain.categories[int(value)])
    if isinstance(domain, Integer):
        value = int(value)
        if domain.q:
            value = int(round(value / domain.q) * domain.q)
            value = min(max(value, -(-domain.lower // domain.q) * domain.q),
                        ((domain.upper - 1) // domain.q) * domain.q)
        return value
    if isinstance(domain, Float):
        return domain.quantize(float(value))
    if isinstance(domain, Normal):
        value = float(value)
        return value if domain.q is None else float(round(round(value / domain.q) * domain.q,
                                                          12))
    if hasattr(value, "item"):  # numpy scalars from a user's ConfigurationSpace
        return value.item()
    return value


__all__ = ["TuneBOHB"]
