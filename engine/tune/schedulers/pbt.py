"""Population based training: a lagging trial restarts from a better trial's checkpoint
with a perturbed config (Ray Tune's ``ray.tune.schedulers.pbt``)."""

from __future__ import annotations

import copy
import math
import random
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from engine.exceptions import ConfigError
from engine.tune.schedulers.trial_scheduler import Decision, Exploit, TrialScheduler
from engine.tune.search.sample import Domain, Float, Integer


Mutation = Union[Sequence[Any], Domain, Callable[[], Any], Dict[str, Any]]


class PopulationBasedTraining(TrialScheduler):
    """Population Based Training: every ``perturbation_interval``, a trial in the bottom
    quantile restarts from the latest checkpoint of a trial in the top quantile, with
    that trial's config perturbed (``hyperparam_mutations``). The trainable must report
    checkpoints and resume from ``get_checkpoint()``.

    Args:
        time_attr: The measure of progress (``training_iteration`` is machine-independent).
        metric, mode: Default to the TuneConfig's.
        perturbation_interval: Time (in ``time_attr``) between perturbations of a trial.
        burn_in_period: No perturbation before this time.
        hyperparam_mutations: Config keys (nested like the param_space) to perturb, each
            a list of values (moved to a neighbour), a domain (resampled or scaled by
            ``perturbation_factors``) or a function returning a value.
        quantile_fraction: Share of trials in the top and bottom quantiles.
        resample_probability: Chance of drawing a fresh value instead of perturbing.
        perturbation_factors: Factors a numeric value is multiplied by.
        custom_explore_fn: ``f(config) -> config`` applied after the mutations.
        log_config: Accepted for Ray Tune compatibility: every exploit is always
            written to the trial's ``pbt_policy.json``.
        require_attrs: Raise when a result lacks ``time_attr`` or the metric (False:
            such a result is ignored).
        synch: Synchronous PBT: a trial that reaches the next perturbation point pauses
            until every live trial has; then the bottom quantile exploits the top one
            and all go on together.
        seed: Seed of the random choices (``TuneConfig(seed=...)`` when not given).
    """

    needs_checkpoints = True

    def __init__(self, time_attr: str = "time_total_s", metric: Optional[str] = None,
                 mode: Optional[str] = None, perturbation_interval: float = 60.0,
                 burn_in_period: float = 0.0,
                 hyperparam_mutations: Optional[Dict[str, Mutation]] = None,
                 quantile_fraction: float = 0.25, resample_probability: float = 0.25,
                 perturbation_factors: Tuple[float, float] = (1.2, 0.8),
                 custom_explore_fn: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None,
                 log_config: bool = True, require_attrs: bool = True, synch: bool = False,
                 seed: Optional[int] = None) -> None:
        super().__init__(metric, mode)
        if not hyperparam_mutations and custom_explore_fn is None:
            raise ConfigError("PopulationBasedTraining needs hyperparam_mutations (or "
                              "custom_explore_fn) to know what to perturb.")
        if not 0 < quantile_fraction <= 0.5:
            raise ConfigError(f"PopulationBasedTraining(quantile_fraction="
                              f"{quantile_fraction}) must be in (0, 0.5].")
        if perturbation_interval <= 0:
            raise ConfigError("PopulationBasedTraining(perturbation_interval=...) must be > 0.")
        self.time_attr = time_attr
        self.perturbation_interval = perturbation_interval
        self.burn_in_period = burn_in_period
        self.hyperparam_mutations = hyperparam_mutations or {}
        self.quantile_fraction = quantile_fraction
        self.resample_probability = resample_probability
        self.perturbation_factors = perturbation_factors
        self.custom_explore_fn = custom_explore_fn
        self.seed = seed
        self._rng = random.Random(seed)
        self._trials: Dict[str, Any] = {}
        self._last_score: Dict[str, float] = {}
        self._last_perturbation: Dict[str, float] = {}
        self.num_exploits = 0
        self.require_attrs, self.synch = require_attrs, synch
        self._next_sync = max(perturbation_interval, burn_in_period)
        self._waiting: Dict[str, float] = {}
        self._done: set = set()
        self._decisions: Dict[str, Decision] = {}

    def set_search_properties(self, metric, mode, seed=None) -> None:
        super().set_search_properties(metric, mode, seed)
        self._require_metric()
        if self.seed is None and seed is not None:
            self.seed = seed
            self._rng = random.Random(seed)

    def on_trial_add(self, trial: Any) -> None:
        self._trials[trial.trial_id] = trial

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_trials"] = {}  # live Trial objects: the tuner adds them back on restore
        return state

    def on_trial_complete(self, trial: Any, result: Optional[Dict[str, Any]]) -> None:
        self._last_score.pop(trial.trial_id, None)
        self._done.add(trial.trial_id)
        self._waiting.pop(trial.trial_id, None)
        self._decisions.pop(trial.trial_id, None)
        if self.synch and self._waiting and self._all_waiting():
            self._sync_step(None)

    def on_trial_result(self, trial: Any, result: Dict[str, Any]) -> Decision:
        self._trials.setdefault(trial.trial_id, trial)
        t, score = result.get(self.time_attr), self._score(result)
        if t is None or score is None:
            if self.require_attrs:
                missing = self.time_attr if t is None else self.metric
                raise ConfigError(
                    f"PopulationBasedTraining: a result of trial {trial.trial_id} has no "
                    f"numeric {missing!r}: report it, or pass require_attrs=False.")
            return self.CONTINUE
        self._last_score[trial.trial_id] = score
        if self.synch:
            return self._synch_result(trial.trial_id, float(t))
        if t < self.burn_in_period:
            return self.CONTINUE
        if t - self._last_perturbation.get(trial.trial_id, 0.0) < self.perturbation_interval:
            return self.CONTINUE
        self._last_perturbation[trial.trial_id] = t
        lower, upper = self._quantiles()
        if trial.trial_id not in lower:
            return self.CONTINUE
        donors = [self._trials[tid] for tid in upper
                  if getattr(self._trials[tid], "checkpoint", None) is not None]
        if not donors:
            return self.CONTINUE
        donor = donors[self._rng.randrange(len(donors))]
        self.num_exploits += 1
        # The trial goes on from the donor's checkpoint, so its clock does too (Ray
        # Tune carries the donor's last perturbation time over).
        donor_t = (getattr(donor.checkpoint, "metrics", None) or {}).get(self.time_attr)
        self._last_perturbation[trial.trial_id] = float(donor_t) if isinstance(
            donor_t, (int, float)) else self._last_perturbation.get(donor.trial_id, t)
        return Exploit(donor=donor, config=self.explore(donor.config),
                       checkpoint=donor.checkpoint)

    # --- synch=True -------------------------------------------------------------
    def _all_waiting(self) -> bool:
        return all(tid in self._waiting for tid in self._trials if tid not in self._done)

    def _synch_result(self, trial_id: str, t: float) -> Decision:
        if t < self._next_sync:
            return self.CONTINUE
        self._waiting[trial_id] = t
        if not self._all_waiting():
            return self.PAUSE
        return self._sync_step(trial_id)

    def _sync_step(self, current: Optional[str]) -> Decision:
        """Every live trial reached the perturbation point: the bottom quantile exploits
        the top; the decision for ``current``, the others' for pop_paused_decisions()."""
        lower, upper = self._quantiles()
        donors = [self._trials[tid] for tid in upper
                  if getattr(self._trials[tid], "checkpoint", None) is not None]
        for tid in self._waiting:
            decision: Decision = self.CONTINUE
            if tid in lower and donors:
                donor = donors[self._rng.randrange(len(donors))]
                self.num_exploits += 1
                decision = Exploit(donor=donor, config=self.explore(donor.config),
                                   checkpoint=donor.checkpoint)
            self._decisions[tid] = decision
        while self._next_sync <= min(self._waiting.values()):
            self._next_sync += self.perturbation_interval
        self._waiting = {}
        return self._decisions.pop(current) if current is not None else self.CONTINUE

    def pop_paused_decisions(self) -> Dict[str, Decision]:
        out, self._decisions = self._decisions, {}
        return out

    def release_waiting(self) -> None:
        if self.synch and self._waiting:
            self._sync_step(None)

    def _quantiles(self) -> Tuple[List[str], List[str]]:
        ranked = sorted(self._last_score, key=lambda tid: self._last_score[tid])
        if len(ranked) <= 1:
            return [], []
        n = min(int(math.ceil(len(ranked) * self.quantile_fraction)), len(ranked) // 2)
        return ranked[:n], ranked[-n:]

    def explore(self, config: Dict[str, Any]) -> Dict[str, Any]:
        """A perturbed copy of ``config``."""
        new = _explore(copy.deepcopy(config), self.hyperparam_mutations, self._rng,
                       self.resample_probability, self.perturbation_factors)
        if self.custom_explore_fn is not None:
            new = self.custom_explore_fn(new)
        return new


def _explore(config: Dict[str, Any], mutations: Dict[str, Mutation], rng: random.Random,
             resample_p: float, factors: Tuple[float, float]) -> Dict[str, Any]:
    for key, mutation in mutations.items():
        if isinstance(mutation, dict):
            sub = config.get(key)
            if isinstance(sub, dict):
                config[key] = _explore(sub, mutation, rng, resample_p, factors)
            continue
        if key not in config:
            continue
        config[key] = _perturb(config[key], mutation, rng, resample_p, factors)
    return config


def _perturb(value: Any, mutation: Any, rng: random.Random, resample_p: float,
             factors: Tuple[float, float]) -> Any:
    resample = rng.random() < resample_p
    if isinstance(mutation, (list, tuple)):
        values = list(mutation)
        if resample or value not in values:
            return copy.deepcopy(values[rng.randrange(len(values))])
        i = values.index(value) + (-1 if rng.random() < 0.5 else 1)
        return copy.deepcopy(values[min(max(i, 0), len(values) - 1)])
    if isinstance(mutation, Domain):
        if resample or not isinstance(value, (int, float)) or isinstance(value, bool):
            return mutation.sample(rng)
        scaled = value * factors[rng.randrange(len(factors))]
        if isinstance(mutation, Integer):
            return int(min(max(round(scaled), mutation.lower), mutation.upper - 1))
        if isinstance(mutation, Float):
            return mutation.quantize(scaled) if mutation.q else scaled
        return scaled
    if callable(mutation):
        if resample or not isinstance(value, (int, float)) or isinstance(value, bool):
            return mutation()
        scaled = value * factors[rng.randrange(len(factors))]
        return int(scaled) if isinstance(value, int) else scaled
    raise ConfigError(f"hyperparam_mutations value {mutation!r} is not a list, a domain, "
                      "a function or a dict.")


PBT = PopulationBasedTraining
