"""``BayesOptSearch``: Gaussian-process Bayesian optimisation through the
bayesian-optimization package (Ray Tune's ``ray.tune.search.bayesopt``), for float
parameters. Imported when the searcher is set up (``pip install 'trainyard[bayesopt]'``)."""

from __future__ import annotations

import copy
import logging
import math
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from engine.exceptions import ConfigError
from engine.tune.search import Float, Path, Searcher, path_name, set_path
from engine.tune.search._libs import flat_point, require, sign, split_space

logger = logging.getLogger("engine")
NAME = "BayesOptSearch"


class BayesOptSearch(Searcher):
    """Suggest float configs with a Gaussian process and an acquisition function.

    Args:
        space: A param_space whose domains are ``tune.uniform``; defaults to the Tuner's.
        metric, mode: Default to ``TuneConfig(metric, mode)``.
        points_to_evaluate: Configs to try first (nested dicts or ``"a/b"`` paths).
        utility_kwargs: ``{"kind": "ucb"|"ei"|"poi", "kappa": 2.576, "xi": 0.0}``.
        random_state: Seed of the optimiser.
        random_search_steps: Results kept back from the model at first, so that the
            first suggestions are random.
        patience: End the search once one config was suggested more than this many
            times (0: never).
        skip_duplicate: Hold back a config already suggested (wait for new results).
    """

    def __init__(self, space: Optional[Dict[str, Any]] = None, metric: Optional[str] = None,
                 mode: Optional[str] = None,
                 points_to_evaluate: Optional[List[Dict[str, Any]]] = None,
                 utility_kwargs: Optional[Dict[str, Any]] = None, random_state: int = 42,
                 random_search_steps: int = 10, verbose: int = 0, patience: int = 5,
                 skip_duplicate: bool = True) -> None:
        if mode not in (None, "min", "max"):
            raise ConfigError(f"BayesOptSearch(mode={mode!r}) must be 'min' or 'max'.")
        self._utility = {"kind": "ucb", "kappa": 2.576, "xi": 0.0, **(utility_kwargs or {})}
        if self._utility["kind"] not in ("ucb", "ei", "poi"):
            raise ConfigError(f"BayesOptSearch(utility_kwargs={{'kind': "
                              f"{self._utility['kind']!r}}}) must be 'ucb', 'ei' or 'poi'.")
        self._space, self.metric, self.mode = space, metric, mode
        self._points = [flat_point(p) for p in points_to_evaluate or []]
        self.random_state, self._random_steps = random_state, random_search_steps
        self._patience, self._skip_duplicate = patience, skip_duplicate
        self._live: Dict[str, Dict[str, float]] = {}
        self._buffer: Optional[List[Tuple[Dict[str, float], float]]] = []
        self._seen: Counter = Counter()
        self._paths: Dict[str, Path] = {}
        self._constants: List[Tuple[Path, Any]] = []

    def set_search_properties(self, metric, mode, param_space, num_samples, seed) -> None:
        super().set_search_properties(metric, mode, param_space, num_samples, seed)
        self._require_metric()
        self._setup(self._space if self._space is not None else param_space)

    def _setup(self, space: Dict[str, Any]) -> None:
        bayes_opt = require("bayes_opt", "bayesopt", NAME)
        domains, self._constants = split_space(space, NAME)
        bounds = {}
        for path, domain in domains:
            name = path_name(path)
            if not isinstance(domain, Float) or domain.q:
                raise ConfigError(f"BayesOptSearch models continuous floats only; {name!r} "
                                  f"is {domain!r}: use tune.uniform(lower, upper).")
            if domain.log:
                logger.warning("BayesOptSearch samples %r uniformly: it has no log scale.",
                               name)
            bounds[name] = (domain.lower, domain.upper)
            self._paths[name] = path
        self._optimizer = bayes_opt.BayesianOptimization(
            f=None, pbounds=bounds, acquisition_function=self._acquisition(bayes_opt),
            random_state=self.random_state, verbose=0, allow_duplicate_points=True)
        if self._random_steps <= 0:
            self._buffer = None

    def _acquisition(self, bayes_opt: Any) -> Any:
        acq, kind = bayes_opt.acquisition, self._utility["kind"]
        if kind == "ucb":
            return acq.UpperConfidenceBound(kappa=self._utility["kappa"],
                                            random_state=self.random_state)
        cls = acq.ExpectedImprovement if kind == "ei" else acq.ProbabilityOfImprovement
        return cls(xi=self._utility["xi"], random_state=self.random_state)

    def suggest(self, trial_id: str) -> Optional[Any]:
        if self._points:
            params = {k: float(v) for k, v in self._points.pop(0).items()}
        else:
            params = {k: float(v) for k, v in self._optimizer.suggest().items()}
            key = tuple(sorted((k, round(v, 5)) for k, v in params.items()))
            self._seen[key] += 1
            if self._patience and self._seen[key] > self._patience:
                logger.info("BayesOptSearch: the same config came %d times; the search "
                            "ends (patience=%d).", self._seen[key], self._patience)
                return Searcher.FINISHED
            if self._skip_duplicate and self._seen[key] > 1:
                return None  # wait for new results to move the model
        self._live[trial_id] = params
        return self._config(params)

    def _config(self, params: Dict[str, float]) -> Dict[str, Any]:
        config: Dict[str, Any] = {}
        for path, value in self._constants:
            set_path(config, path, copy.deepcopy(value))
        for name, value in params.items():
            set_path(config, self._paths[name], value)
        return config

    def on_trial_complete(self, trial_id: str, result: Optional[Dict[str, Any]] = None,
                          error: bool = False) -> None:
        params = self._live.pop(trial_id, None)
        value = (result or {}).get(self.metric)
        if params is None or error or not isinstance(value, (int, float)) \
                or math.isnan(float(value)):
            return
        target = sign(self.mode) * float(value)
        if self._buffer is None:
            self._optimizer.register(params=params, target=target)
            return
        self._buffer.append((params, target))
        if len(self._buffer) >= self._random_steps:  # enough random results: model them
            for p, t in self._buffer:
                self._optimizer.register(params=p, target=t)
            self._buffer = None


__all__ = ["BayesOptSearch"]
