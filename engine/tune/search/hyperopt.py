"""``HyperOptSearch``: Tree-structured Parzen Estimators through hyperopt (Ray Tune's
``ray.tune.search.hyperopt``). hyperopt is imported when the searcher is set up
(``pip install 'trainyard[hyperopt]'``)."""

from __future__ import annotations

import copy
import math
import random
from functools import partial
from typing import Any, Dict, List, Optional, Tuple

from engine.exceptions import ConfigError
from engine.tune.search import (Categorical, Domain, Float, Integer, Normal, Path, Searcher,
                                path_name, set_path)
from engine.tune.search._libs import flat_point, require, sign, split_space

NAME = "HyperOptSearch"


class HyperOptSearch(Searcher):
    """Suggest configs with hyperopt's TPE.

    Args:
        space: A param_space of trainyard domains; defaults to the Tuner's.
        metric, mode: Default to ``TuneConfig(metric, mode)``.
        points_to_evaluate: Configs to try first (nested dicts or ``"a/b"`` paths).
        n_initial_points: Random configs before TPE models the results.
        random_state_seed: Seed (``TuneConfig(seed=...)`` when not given).
        gamma: TPE's share of "good" results.
    """

    def __init__(self, space: Optional[Dict[str, Any]] = None, metric: Optional[str] = None,
                 mode: Optional[str] = None,
                 points_to_evaluate: Optional[List[Dict[str, Any]]] = None,
                 n_initial_points: int = 20, random_state_seed: Optional[int] = None,
                 gamma: float = 0.25) -> None:
        if mode not in (None, "min", "max"):
            raise ConfigError(f"HyperOptSearch(mode={mode!r}) must be 'min' or 'max'.")
        if n_initial_points < 1:
            raise ConfigError(f"HyperOptSearch(n_initial_points={n_initial_points}) must be "
                              ">= 1.")
        self._space, self.metric, self.mode = space, metric, mode
        self._points = [flat_point(p) for p in points_to_evaluate or []]
        self._n_initial, self._gamma, self.seed = n_initial_points, gamma, random_state_seed
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

    def _setup(self, space: Dict[str, Any]) -> None:
        hpo = require("hyperopt", "hyperopt", NAME)
        domains, self._constants = split_space(space, NAME)
        self._paths = {path_name(p): p for p, _ in domains}
        self._domains = {path_name(p): d for p, d in domains}
        nodes = {label: _to_hyperopt(hpo.hp, label, d) for label, d in self._domains.items()}
        self._hpo = hpo
        self._domain = hpo.Domain(lambda spc: spc, nodes)
        self._algo = partial(hpo.tpe.suggest, n_startup_jobs=self._n_initial,
                             gamma=self._gamma)
        self._rng = random.Random(self.seed)
        self._trials = hpo.Trials()
        self._pending_points = 0
        if self._points:
            from hyperopt.fmin import generate_trials_to_calculate

            self._trials = generate_trials_to_calculate(
                [self._as_hyperopt_point(p) for p in self._points])
            self._trials.refresh()
            self._pending_points = len(self._points)

    def _as_hyperopt_point(self, point: Dict[str, Any]) -> Dict[str, Any]:
        """hyperopt stores a choice as its index."""
        out = {}
        for label, value in point.items():
            domain = self._domains.get(label)
            if domain is None:
                raise ConfigError(f"HyperOptSearch(points_to_evaluate=...) names {label!r}, "
                                  f"which is not in the search space {sorted(self._domains)}.")
            out[label] = domain.categories.index(value) \
                if isinstance(domain, Categorical) else value
        return out

    def suggest(self, trial_id: str) -> Optional[Dict[str, Any]]:
        trials = self._trials
        if self._pending_points > 0:
            doc = trials.trials[len(self._points) - self._pending_points]
            self._pending_points -= 1
        else:
            ids = trials.new_trial_ids(1)
            trials.refresh()
            docs = self._algo(ids, self._domain, trials, self._rng.randrange(2 ** 31 - 1))
            trials.insert_trial_docs(docs)
            trials.refresh()
            doc = docs[0]
        self._live[trial_id] = doc
        flat = self._evaluate(doc)
        return self._config(flat)

    def _evaluate(self, doc: Dict[str, Any]) -> Dict[str, Any]:
        hpo = self._hpo
        config = hpo.base.spec_from_misc(doc["misc"])
        ctrl = hpo.base.Ctrl(self._trials, current_trial=doc)
        memo = self._domain.memo_from_config(config)
        hpo.utils.use_obj_for_literal_in_memo(self._domain.expr, ctrl, hpo.base.Ctrl, memo)
        return hpo.pyll.rec_eval(self._domain.expr, memo=memo)

    def _config(self, flat: Dict[str, Any]) -> Dict[str, Any]:
        config: Dict[str, Any] = {}
        for path, value in self._constants:
            set_path(config, path, copy.deepcopy(value))
        for label, value in flat.items():
            set_path(config, self._paths[label], _from_hyperopt(self._domains[label], value))
        return config

    def on_trial_complete(self, trial_id: str, result: Optional[Dict[str, Any]] = None,
                          error: bool = False) -> None:
        doc = self._live.pop(trial_id, None)
        if doc is None:
            return
        hpo = self._hpo
        doc["refresh_time"] = hpo.utils.coarse_utcnow()
        value = (result or {}).get(self.metric)
        if error or not isinstance(value, (int, float)) or math.isnan(float(value)):
            doc["state"] = hpo.base.JOB_STATE_ERROR
            doc["misc"]["error"] = ("TrialError", "the trial failed or reported no "
                                    f"{self.metric!r}")
        else:
            doc["state"] = hpo.base.JOB_STATE_DONE
            doc["result"] = {"loss": -sign(self.mode) * float(value), "status": "ok"}
        self._trials.refresh()


def _to_hyperopt(hp: Any, label: str, domain: Domain) -> Any:
    if isinstance(domain, Categorical):
        return hp.choice(label, domain.categories)
    if isinstance(domain, Float):
        lo, hi = domain.lower, domain.upper
        if domain.log:
            lo, hi = math.log(lo), math.log(hi)  # hyperopt's log scale is natural
            return hp.qloguniform(label, lo, hi, domain.q) if domain.q \
                else hp.loguniform(label, lo, hi)
        return hp.quniform(label, lo, hi, domain.q) if domain.q else hp.uniform(label, lo, hi)
    if isinstance(domain, Integer):
        if domain.log:
            return hp.qloguniform(label, math.log(domain.lower),
                                  math.log(domain.upper - 1), domain.q or 1)
        if domain.q:
            return hp.quniform(label, domain.lower, domain.upper - 1, domain.q)
        return hp.randint(label, domain.lower, domain.upper)
    if isinstance(domain, Normal):
        return hp.qnormal(label, domain.mean, domain.sd, domain.q) if domain.q \
            else hp.normal(label, domain.mean, domain.sd)
    raise ConfigError(f"HyperOptSearch cannot model {domain!r} (at {label!r}).")


def _from_hyperopt(domain: Domain, value: Any) -> Any:
    """Back to the domain's type and range (hyperopt returns floats for q-integers)."""
    if isinstance(domain, Integer):
        return int(min(max(int(round(float(value))), domain.lower), domain.upper - 1))
    if isinstance(domain, Float):
        return domain.quantize(float(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if isinstance(domain, Normal) else value
    return copy.deepcopy(value)


__all__ = ["HyperOptSearch"]
