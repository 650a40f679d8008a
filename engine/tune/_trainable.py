"""How a Tuner turns its trainable (a trainer or a function) and one trial's config into
the ``RunSpec`` a controller runs."""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable, Dict, Optional

from engine._internal.execution.controller import RunSpec
from engine._internal.worker_group.backend import BackendConfig
from engine._internal.worker_group.pool import resettable
from engine.config import RunConfig, ScalingConfig
from engine.exceptions import ConfigError

_RESOURCES_ATTR = "_trainyard_resources"


def with_resources(trainable: Callable, resources: Dict[str, float]) -> Callable:
    """A function trainable that asks for ``resources`` per trial (default ``{"CPU": 1}``).

    Args:
        trainable: ``f(config)`` that calls ``report()``.
        resources: Ray resources of the trial's one worker, e.g. ``{"CPU": 2}``.

    Returns:
        The same function, marked with its resources.

    Raises:
        ConfigError: ``trainable`` is a trainer (use its ``scaling_config``).
    """
    from engine.trainer import BaseTrainer
    from engine.tune.trainable import is_trainable_class

    if isinstance(trainable, BaseTrainer) or not callable(trainable):
        raise ConfigError("with_resources() takes a function or a Trainable class; a "
                          "trainer's resources come from its ScalingConfig (or "
                          "param_space['scaling_config']).")
    if is_trainable_class(trainable):  # a subclass that carries them (picklable by value)
        return type(trainable.__name__, (trainable,), {
            _RESOURCES_ATTR: ray_resources(resources), "__module__": trainable.__module__,
            "__qualname__": trainable.__qualname__})
    wrapped = functools.partial(trainable)
    setattr(wrapped, _RESOURCES_ATTR, ray_resources(resources))
    return wrapped


def ray_resources(resources: Any) -> Dict[str, float]:
    """``with_resources``' dict in Ray's resource names, read as Ray Tune reads it:
    ``cpu``/``gpu`` are ``CPU``/``GPU``, ``memory`` stays, ``custom_resources`` is
    merged in, and any other key is a custom resource."""
    if not isinstance(resources, dict):
        raise ConfigError(
            f"with_resources(trainable, {resources!r}): pass a dict such as "
            "{'cpu': 2, 'gpu': 0} or {'CPU': 2}.")
    out: Dict[str, float] = {}
    for key, value in resources.items():
        if key == "custom_resources":
            out.update(dict(value or {}))
            continue
        name = {"cpu": "CPU", "gpu": "GPU"}.get(key, key)
        if name in out:
            raise ConfigError(f"with_resources(trainable, {resources!r}) names {name} "
                              f"twice ({key!r} and {name!r}): keep one.")
        out[name] = value
    return {k: v for k, v in out.items() if k not in ("GPU",) or v}


def _deep_merge(base: Dict[str, Any], override: Dict[str, Any]) -> Dict[str, Any]:
    out = copy.copy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class Trainable:
    """What the trial loop needs from a trainable."""

    name: str = "trainable"
    reusable: bool = False   # reuse worker actors across trials by default
    can_reuse: bool = False  # reusing them is safe (no framework state in the process)

    def make_spec(self, config: Dict[str, Any], run_config: RunConfig,
                  trial_info: Dict[str, Any]) -> RunSpec:
        raise NotImplementedError

    def train_loop_config(self, config: Dict[str, Any]) -> Dict[str, Any]:
        """The ``config`` the training function sees for a trial's ``config``."""
        raise NotImplementedError

    def base_run_config(self) -> Optional[RunConfig]:
        return None

    def bind(self, run_config: RunConfig) -> None:
        """The experiment's RunConfig, before any trial starts (the trials' own carry
        no ``stop``: the tuner checks it)."""


class FunctionTrainable(Trainable):
    """``f(config)`` on one worker with the no-op backend."""

    reusable = can_reuse = True

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        inner = fn.func if isinstance(fn, functools.partial) else fn
        self.name = getattr(inner, "__name__", "trainable")
        resources = dict(getattr(fn, _RESOURCES_ATTR, None) or {"CPU": 1})
        self.scaling = ScalingConfig(num_workers=1, use_gpu=bool(resources.get("GPU")),
                                     resources_per_worker=resources)

    def make_spec(self, config, run_config, trial_info) -> RunSpec:
        return RunSpec(train_func=self.fn, train_loop_config=config,
                       scaling_config=self.scaling, run_config=run_config,
                       backend_config=BackendConfig(), trainer_name=self.name,
                       trial_info=dict(trial_info))

    def train_loop_config(self, config):
        return config


class TrainerTrainable(Trainable):
    """A trainer whose ``param_space`` keys override its constructor arguments
    (``train_loop_config`` and other dicts are merged key by key)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.name = type(trainer).__name__
        self.can_reuse = self.reusable = resettable(getattr(trainer, "backend_config", None))

    def base_run_config(self) -> Optional[RunConfig]:
        return getattr(self.trainer, "run_config", None)

    def _configured(self, config: Dict[str, Any]) -> Any:
        trainer = copy.copy(self.trainer)
        for key, value in config.items():
            if key == "run_config":
                raise ConfigError("param_space cannot set run_config: pass "
                                  "Tuner(run_config=RunConfig(...)).")
            if not hasattr(trainer, key):
                raise ConfigError(
                    f"param_space key {key!r} is not a setting of {self.name}: use "
                    "'train_loop_config' (the training function's config) or "
                    "'scaling_config'."
                )
            current = getattr(trainer, key)
            if key == "scaling_config" and isinstance(value, dict):
                value = ScalingConfig(**_deep_merge(_scaling_kwargs(current), value))
            elif isinstance(value, dict) and isinstance(current, dict):
                value = _deep_merge(current, value)
            elif isinstance(value, dict) and current is None:
                value = dict(value)
            setattr(trainer, key, value)
        return trainer

    def make_spec(self, config, run_config, trial_info) -> RunSpec:
        trainer = self._configured(config)
        trainer.run_config = run_config
        spec = trainer._run_spec()
        spec.trial_info = dict(trial_info)
        return spec

    def train_loop_config(self, config):
        return self._configured(config).train_loop_config


def _scaling_kwargs(scaling: Optional[ScalingConfig]) -> Dict[str, Any]:
    if scaling is None:
        return {}
    return {k: getattr(scaling, k) for k in ("num_workers", "use_gpu", "resources_per_worker",
                                             "trainer_resources", "placement_strategy")}


class ClassTrainable(FunctionTrainable):
    """A ``engine.tune.Trainable`` subclass, run by a function that steps an instance of
    it (``engine.tune.trainable.class_train_func``), checkpointing as the trial's
    ``CheckpointConfig(checkpoint_frequency, checkpoint_at_end)`` says."""

    def __init__(self, cls: type) -> None:
        super().__init__(cls)
        self.cls = cls
        self.name = cls.__name__
        self.stop: Any = None

    def bind(self, run_config: RunConfig) -> None:
        self.stop = run_config.stop  # a dict marks a trial's last iteration (at_end)

    def make_spec(self, config, run_config, trial_info) -> RunSpec:
        from engine.tune.trainable import class_train_func

        cc = run_config.checkpoint_config
        fn = class_train_func(self.cls, cc.checkpoint_frequency,
                              bool(cc.checkpoint_at_end), self.stop)
        scaling = self.scaling
        requested = self.cls.default_resource_request(config)
        if requested is not None and getattr(self.cls, _RESOURCES_ATTR, None) is None:
            resources = ray_resources(getattr(requested, "required_resources", requested))
            scaling = ScalingConfig(num_workers=1, use_gpu=bool(resources.get("GPU")),
                                    resources_per_worker=resources)
        return RunSpec(train_func=fn, train_loop_config=config, scaling_config=scaling,
                       run_config=run_config, backend_config=BackendConfig(),
                       trainer_name=self.name, trial_info=dict(trial_info))


def make_trainable(trainable: Any) -> Trainable:
    from engine.trainer import BaseTrainer
    from engine.tune.trainable import is_trainable_class

    if is_trainable_class(trainable):
        return ClassTrainable(trainable)

    if isinstance(trainable, BaseTrainer):
        if not hasattr(trainable, "_run_spec"):
            raise ConfigError(f"{type(trainable).__name__} cannot be tuned: the Tuner runs "
                              "DataParallelTrainer subclasses and functions.")
        return TrainerTrainable(trainable)
    if callable(trainable):
        return FunctionTrainable(trainable)
    raise ConfigError(f"Tuner(trainable) must be a trainer or a function f(config), got "
                      f"{type(trainable).__name__}.")
