"""OptunaSearch: model-based search (TPE by default) through Optuna's ask/tell interface.

Optuna is imported when the searcher is set up, never by ``import engine.tune``
(``pip install 'trainyard[tune]'``).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

from engine.exceptions import ConfigError
from engine.tune.search import (Categorical, Domain, Float, Integer, Path, Searcher, is_grid,
                                leaves, path_name, set_path)


class OptunaSearch(Searcher):
    """Suggest configs with an Optuna sampler (TPE unless ``sampler`` says otherwise).

    Args:
        space: A param_space; defaults to the Tuner's ``param_space``. Grids are not
            supported (Optuna samples every value): use ``choice([...])``.
        metric, mode: Default to ``TuneConfig(metric, mode)``.
        points_to_evaluate: Configs (flat dicts of ``"a/b"`` paths or nested dicts) to
            try first.
        sampler: An ``optuna.samplers.BaseSampler``; default
            ``TPESampler(seed=seed)``.
        seed: Seed of the default sampler (``TuneConfig(seed=...)`` when not given).
    """

    def __init__(self, space: Optional[Dict[str, Any]] = None, metric: Optional[str] = None,
                 mode: Optional[str] = None,
                 points_to_evaluate: Optional[List[Dict[str, Any]]] = None,
                 sampler: Any = None, seed: Optional[int] = None) -> None:
        if mode not in (None, "min", "max"):
            raise ConfigError(f"OptunaSearch(mode={mode!r}) must be 'min' or 'max'.")
        self._space = space
        self.metric = metric
        self.mode = mode
        self._points = [dict(p) for p in (points_to_evaluate or [])]
        self._sampler = sampler
        self.seed = seed
        self._study = None
        self._distributions: Dict[str, Any] = {}
        self._constants: List[tuple] = []
        self._paths: Dict[str, Path] = {}
        self._ot_trials: Dict[str, Any] = {}

    def set_search_properties(self, metric, mode, param_space, num_samples, seed) -> None:
        super().set_search_properties(metric, mode, param_space, num_samples, seed)
        self._require_metric()
        if self.seed is None:
            self.seed = seed
        self._setup(self._space if self._space is not None else param_space)

    def _setup(self, space: Dict[str, Any]) -> None:
        try:
            import optuna
        except ImportError as exc:
            raise ImportError(
                "OptunaSearch needs optuna: pip install 'trainyard[tune]'"
            ) from exc
        for path, value in leaves(space):
            if is_grid(value):
                raise ConfigError(
                    f"OptunaSearch cannot search grid_search at {path_name(path)!r}: use "
                    "choice([...]) instead (Optuna samples every value)."
                )
            if isinstance(value, Domain):
                name = path_name(path)
                self._paths[name] = path
                self._distributions[name] = _to_optuna(value, optuna)
            elif path:
                self._constants.append((path, value))
        if not self._distributions:
            raise ConfigError("OptunaSearch found nothing to search in the param_space: use "
                              "uniform(...), loguniform(...), randint(...) or choice(...).")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = self._sampler or optuna.samplers.TPESampler(seed=self.seed)
        direction = "maximize" if self.mode == "max" else "minimize"
        self._study = optuna.create_study(sampler=sampler, direction=direction)
        for point in self._points:
            self._study.enqueue_trial(_flat_point(point, self._paths))

    def suggest(self, trial_id: str) -> Optional[Dict[str, Any]]:
        assert self._study is not None, "set_search_properties() first"
        ot_trial = self._study.ask(self._distributions)
        self._ot_trials[trial_id] = ot_trial
        config: Dict[str, Any] = {}
        for path, value in self._constants:
            set_path(config, path, value)
        for name, value in ot_trial.params.items():
            set_path(config, self._paths[name], value)
        return config

    def on_trial_complete(self, trial_id: str, result: Optional[Dict[str, Any]] = None,
                          error: bool = False) -> None:
        import optuna

        ot_trial = self._ot_trials.pop(trial_id, None)
        if ot_trial is None:
            return
        value = (result or {}).get(self.metric) if not error else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or math.isnan(float(value)):
            self._study.tell(ot_trial, state=optuna.trial.TrialState.FAIL)
        else:
            self._study.tell(ot_trial, float(value))

    def __getstate__(self) -> Dict[str, Any]:
        # Unfinished asks cannot be told after a restore: their trials report again.
        state = dict(self.__dict__)
        state["_ot_trials"] = {}
        return state


def _to_optuna(domain: Domain, optuna: Any) -> Any:
    dists = optuna.distributions
    if isinstance(domain, Categorical):
        return dists.CategoricalDistribution(domain.categories)
    if isinstance(domain, Integer):
        if domain.log and domain.q not in (None, 1):
            raise ConfigError("OptunaSearch cannot search a quantized log integer range.")
        return dists.IntDistribution(domain.lower, domain.upper - 1, log=domain.log,
                                     step=1 if domain.log else (domain.q or 1))
    if isinstance(domain, Float):
        if domain.log and domain.q is None:
            return dists.FloatDistribution(domain.lower, domain.upper, log=True)
        if domain.log:
            raise ConfigError("OptunaSearch cannot search a quantized log range.")
        return dists.FloatDistribution(domain.lower, domain.upper, step=domain.q)
    raise ConfigError(f"OptunaSearch cannot search {domain!r}.")


def _flat_point(point: Dict[str, Any], paths: Dict[str, Path]) -> Dict[str, Any]:
    flat: Dict[str, Any] = {}
    for path, value in leaves(point):
        name = path_name(path)
        if name in paths:
            flat[name] = value
    return flat


__all__ = ["OptunaSearch"]
