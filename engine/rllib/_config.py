"""From ``RLTrainer``'s arguments to an RLlib ``AlgorithmConfig`` and its resources.

The same functions run on the driver (to size the placement group) and on the worker
(to build the algorithm), so both always agree. Everything here imports RLlib.
"""

from __future__ import annotations

import contextlib
import copy
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

from engine.config import ScalingConfig
from engine.exceptions import ConfigError

# Config keys (and their older spellings) that ScalingConfig decides when it is given.
_ENV_RUNNER_COUNT_KEYS = ("num_env_runners", "num_workers", "num_rollout_workers")
_SCALED_FIELDS = {
    "num_env_runners": "num_workers",
    "num_cpus_per_env_runner": "resources_per_worker['CPU']",
    "num_gpus_per_env_runner": "resources_per_worker['GPU']",
    "custom_resources_per_env_runner": "resources_per_worker",
    "num_cpus_for_main_process": "trainer_resources['CPU']",
    "custom_resources_for_main_process": "trainer_resources",
    "num_gpus_per_learner": "use_gpu / trainer_resources['GPU']",
    "placement_strategy": "placement_strategy",
}
_KEY_ALIASES = {"num_workers": "num_env_runners", "num_rollout_workers": "num_env_runners",
                "num_cpus_per_worker": "num_cpus_per_env_runner",
                "num_gpus_per_worker": "num_gpus_per_env_runner",
                "custom_resources_per_worker": "custom_resources_per_env_runner",
                "num_cpus_for_driver": "num_cpus_for_main_process",
                "num_cpus_for_local_worker": "num_cpus_for_main_process"}


@contextlib.contextmanager
def tensorflow_left_as_is() -> Iterator[None]:
    """Import RLlib inside this block without changing TensorFlow for the rest of the
    process.

    The first import of RLlib imports TensorFlow (when it is installed) and turns
    TensorFlow 2 behaviour off process-wide (``tf.compat.v1.disable_v2_behavior()``, for
    its graph-mode policies). On a driver that only plans an RL run, that would break any
    later TensorFlow work in the same process: no eager tensors, Keras files that no
    longer load, a ``TensorflowTrainer``'s predictor failing. When it was this block that
    brought TensorFlow in, TensorFlow 2 behaviour is turned back on afterwards. The
    algorithm itself runs in its own worker process, where RLlib keeps its setting.
    """
    tensorflow_was_imported = "tensorflow" in sys.modules
    try:
        yield
    finally:
        tf = sys.modules.get("tensorflow")
        if not tensorflow_was_imported and tf is not None and hasattr(tf, "compat"):
            if not tf.executing_eagerly():
                tf.compat.v1.enable_v2_behavior()


@dataclass
class RLScalingConfig(ScalingConfig):
    """The worker group of an RL run: one worker (the algorithm's own process) plus
    ``child_bundles`` for the actors RLlib starts from it (env runners, learners). The
    worker group puts those bundles in its placement group and lets the worker's
    children use them."""

    child_bundles: List[Dict[str, float]] = field(default_factory=list)

    @property
    def total_resources(self) -> Dict[str, float]:
        total = dict(super().total_resources)
        for bundle in self.child_bundles:
            for key, value in bundle.items():
                total[key] = total.get(key, 0.0) + float(value)
        return total


def algorithm_name(algorithm: Any) -> str:
    """A display name for ``algorithm`` (a registry name or an Algorithm subclass)."""
    if isinstance(algorithm, str):
        return algorithm
    return getattr(algorithm, "__name__", type(algorithm).__name__)


def resolve_algorithm(algorithm: Any, base: Any) -> type:
    """The Algorithm class named by ``algorithm`` (a name like ``"PPO"`` or a class), or
    the one ``base`` (an AlgorithmConfig) was made for."""
    from ray.rllib.algorithms.algorithm import Algorithm

    if algorithm is None:
        cls = getattr(base, "algo_class", None)
        if cls is None:
            raise ConfigError("RLTrainer needs an algorithm: pass algorithm='PPO' (or an "
                              "Algorithm subclass), or config=PPOConfig()...")
    elif isinstance(algorithm, str):
        cls = _registered(algorithm)
    elif isinstance(algorithm, type) and issubclass(algorithm, Algorithm):
        cls = algorithm
    else:
        raise ConfigError(f"RLTrainer(algorithm={algorithm!r}) is invalid: pass an RLlib "
                          "algorithm name like 'PPO' or an Algorithm subclass.")
    base_cls = getattr(base, "algo_class", None)
    if base_cls is not None and algorithm is not None and base_cls is not cls:
        raise ConfigError(
            f"RLTrainer(algorithm={algorithm_name(algorithm)!r}) does not match the config, "
            f"which is for {base_cls.__name__}: drop algorithm= or pass that algorithm's "
            "config."
        )
    return cls


def _registered(name: str) -> type:
    from ray.rllib.algorithms.registry import ALGORITHMS, _get_algorithm_class

    if name not in ALGORITHMS:
        raise ConfigError(f"RLTrainer(algorithm={name!r}) is not an RLlib algorithm: use "
                          f"one of {', '.join(sorted(ALGORITHMS))}, or pass the Algorithm "
                          "subclass itself.")
    return _get_algorithm_class(name)


def build_config(algorithm: Any, base: Any, overrides: Optional[Dict[str, Any]],
                 scaling: Optional[ScalingConfig]) -> Tuple[type, Any]:
    """The Algorithm class and the AlgorithmConfig to build it from: ``base`` (or the
    algorithm's defaults), updated with ``overrides``, then sized by ``scaling``.

    Raises:
        ConfigError: unknown algorithm, a bad config key, or an env-runner setting in
            ``overrides``/``base`` that contradicts ``scaling``.
    """
    cls = resolve_algorithm(algorithm, base)
    cfg = base.copy(copy_frozen=False) if base is not None else cls.get_default_config()
    if overrides:
        if not isinstance(overrides, dict):
            raise ConfigError("RLTrainer(config=...) must be a dict of AlgorithmConfig "
                              f"settings or an AlgorithmConfig, got {type(overrides).__name__}.")
        _check_keys(cfg, overrides)
        try:
            cfg.update_from_dict(copy.deepcopy(overrides))
        except Exception as exc:
            raise ConfigError(f"RLlib rejected RLTrainer(config=...): {exc}") from exc
    if scaling is not None:
        explicit = _explicit_fields(cls, base, overrides or {})
        before = {name: copy.deepcopy(getattr(cfg, name)) for name in _SCALED_FIELDS}
        apply_scaling(cfg, scaling)
        for name in sorted(explicit):
            if before[name] != getattr(cfg, name):
                raise ConfigError(
                    f"The algorithm config sets {name}={before[name]!r} but "
                    f"ScalingConfig decides it ({_SCALED_FIELDS[name]}) and gives "
                    f"{getattr(cfg, name)!r}: set it in one place (drop it from the config, "
                    "or pass scaling_config=None to size the run from the config alone)."
                )
    return cls, cfg


def _check_keys(cfg: Any, overrides: Dict[str, Any]) -> None:
    """Refuse keys that are no setting of ``cfg`` (RLlib's ``update_from_dict`` would
    store a typo, or a setting an RLlib version renamed, without effect)."""
    import difflib

    translate = getattr(type(cfg), "_translate_special_keys", None)
    for key in overrides:
        if not isinstance(key, str):
            raise ConfigError(f"RLTrainer(config=...) key {key!r} must be a str.")
        name = translate(key, warn_deprecated=False) if translate else key
        if name == "multiagent":
            continue
        try:
            getattr(cfg, name)
        except AttributeError:
            settings = [a for a in dir(cfg) if not a.startswith("_")]
            close = difflib.get_close_matches(key, settings, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(f"RLTrainer(config={{{key!r}: ...}}) is not a setting of "
                              f"{type(cfg).__name__}.{hint}") from None
        except Exception as exc:  # RLlib raises on settings it renamed
            raise ConfigError(f"RLTrainer(config={{{key!r}: ...}}): {exc}") from exc


def _explicit_fields(cls: type, base: Any, overrides: Dict[str, Any]) -> set:
    """The scaled fields the user set: keys of ``overrides`` and fields of ``base``
    that differ from the algorithm's defaults."""
    names = {_KEY_ALIASES.get(k, k) for k in overrides} & set(_SCALED_FIELDS)
    if base is not None:
        default = cls.get_default_config()
        names |= {n for n in _SCALED_FIELDS if getattr(base, n) != getattr(default, n)}
    return names


def apply_scaling(cfg: Any, scaling: ScalingConfig) -> None:
    """ScalingConfig → RLlib resources.

    ``num_workers`` env runners, each with ``resources_per_worker`` (default 1 CPU);
    the algorithm's own process (sampling driver and local learner) gets
    ``trainer_resources`` (default 1 CPU); ``use_gpu`` gives each learner one GPU; a
    ``placement_strategy`` other than PACK replaces the config's.
    """
    runner = dict(scaling.resources_per_worker or {})
    cfg.env_runners(
        num_env_runners=scaling.num_workers,
        num_cpus_per_env_runner=runner.pop("CPU", 1),
        num_gpus_per_env_runner=runner.pop("GPU", 0),
        custom_resources_per_env_runner=runner,
    )
    main = dict(scaling.trainer_resources or {})
    gpus = main.pop("GPU", 1 if scaling.use_gpu else 0)
    cfg.resources(num_cpus_for_main_process=main.pop("CPU", 1),
                  custom_resources_for_main_process=main)
    cfg.learners(num_gpus_per_learner=gpus)
    if scaling.placement_strategy != "PACK":  # PACK is both defaults: keep the config's
        cfg.resources(placement_strategy=scaling.placement_strategy)


def resource_bundles(cls: type, cfg: Any) -> Tuple[List[Dict[str, float]], str]:
    """The placement-group bundles RLlib asks for (the algorithm's process first, then
    env runners, evaluation runners and learners, in RLlib's order) and the strategy."""
    try:
        request = cls.default_resource_request(cfg)
    except Exception as exc:  # RLlib validates the config here
        raise ConfigError(f"RLlib rejected the algorithm config: {exc}") from exc
    bundles = [{k: float(v) for k, v in b.items() if v} for b in request.bundles]
    for i, bundle in enumerate(bundles):
        if not bundle:
            what = "the algorithm's own process" if i == 0 else f"actor bundle {i}"
            raise ConfigError(
                f"RLlib asks for no resources for {what}, which Ray cannot place: give it "
                "some (e.g. num_cpus_for_main_process / num_cpus_per_env_runner > 0)."
            )
    return bundles, request.strategy


def plan_scaling(bundles: List[Dict[str, float]], strategy: str) -> RLScalingConfig:
    """The worker group for ``bundles``: one worker on the first, the rest for children."""
    main = dict(bundles[0])
    return RLScalingConfig(num_workers=1, use_gpu=bool(main.get("GPU")),
                           resources_per_worker=main, placement_strategy=strategy,
                           child_bundles=[dict(b) for b in bundles[1:]])
