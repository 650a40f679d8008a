"""User-facing configuration objects: scaling, run, checkpoint, failure and data."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

from engine._internal.storage.uris import redact
from engine.constants import METRICS_REDUCE_OPS
from engine.exceptions import ConfigError

# This module is the bottom of the engine: it imports only constants, exceptions and leaf
# helpers. Callbacks are checked by duck typing (the hooks the callback runner calls),
# not against engine.callbacks.Callback, which sits above.
_HOOK_PREFIXES = ("on_", "log_trial_")

_PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def is_search_marker(value: Any) -> bool:
    """A Tune search-space marker: a domain (``tune.choice`` …) or ``grid_search``
    (checked by shape: this module does not import engine.tune)."""
    if getattr(type(value), "_search_space_marker", False):
        return True
    return isinstance(value, dict) and len(value) == 1 and "grid_search" in value


def search_markers(config: Any) -> List[str]:
    """The fields of a config object that hold a search-space marker (also inside a
    dict field, e.g. ``resources_per_worker={"CPU": tune.choice([1, 2])}``)."""
    out = []
    for name in getattr(config, "__dataclass_fields__", {}):
        value = getattr(config, name)
        if is_search_marker(value) or (isinstance(value, dict) and any(
                is_search_marker(v) for v in value.values())):
            out.append(name)
    return out


def check_no_search_space(config: Any, where: str) -> None:
    """A search-space marker left in a config object that is about to be used."""
    fields = search_markers(config)
    if fields:
        raise ConfigError(
            f"{type(config).__name__}({fields[0]}=...) holds a search space "
            f"(tune.grid_search / a sampling domain), which only a Tuner resolves, per "
            f"trial: {where}, e.g. Tuner(trainer, param_space={{'scaling_config': "
            f"ScalingConfig(num_workers=tune.grid_search([1, 2]))}}), or give a value.")
_SCORE_ORDERS = ("max", "min")


@dataclass
class ScalingConfig:
    """How many workers to run and what each one gets.

    Args:
        num_workers: Number of training workers (Ray actors), at least 1.
        use_gpu: Give each worker one GPU (unless ``resources_per_worker`` says more).
        resources_per_worker: Ray resources per worker, e.g. ``{"CPU": 2}``.
            Defaults to 1 CPU (plus 1 GPU with ``use_gpu``).
        trainer_resources: Resources reserved for the driver-side trainer bundle.
            Defaults to none: the driver loop runs in your process.
        placement_strategy: Ray placement strategy of the worker group:
            ``PACK`` (default), ``SPREAD``, ``STRICT_PACK`` or ``STRICT_SPREAD``.
    """

    num_workers: int = 1
    use_gpu: bool = False
    resources_per_worker: Optional[Dict[str, float]] = None
    trainer_resources: Optional[Dict[str, float]] = None
    placement_strategy: str = "PACK"

    def __post_init__(self) -> None:
        if search_markers(self):  # a Tuner's param_space: checked once resolved per trial
            return
        if not isinstance(self.num_workers, int) or isinstance(self.num_workers, bool) \
                or self.num_workers < 1:
            raise ConfigError(
                f"ScalingConfig(num_workers={self.num_workers!r}) is invalid: "
                "set num_workers to an integer >= 1 (e.g. ScalingConfig(num_workers=2))."
            )
        strategy = str(self.placement_strategy).upper()
        if strategy not in _PLACEMENT_STRATEGIES:
            raise ConfigError(
                f"ScalingConfig(placement_strategy={self.placement_strategy!r}) is unknown: "
                f"use one of {', '.join(_PLACEMENT_STRATEGIES)}."
            )
        self.placement_strategy = strategy
        if not isinstance(self.use_gpu, bool):
            raise ConfigError(
                f"ScalingConfig(use_gpu={self.use_gpu!r}) is invalid: use True or False.")
        for name in ("resources_per_worker", "trainer_resources"):
            res = getattr(self, name)
            if res is None:
                continue
            if not isinstance(res, dict):
                raise ConfigError(f"ScalingConfig({name}=...) must be a dict like {{'CPU': 1}}.")
            for key, value in res.items():
                if not isinstance(value, (int, float)) or value < 0:
                    raise ConfigError(
                        f"ScalingConfig({name}={{{key!r}: {value!r}}}) is invalid: "
                        "resource amounts must be numbers >= 0."
                    )
        gpus = (self.resources_per_worker or {}).get("GPU", 0)
        if gpus and not self.use_gpu:
            raise ConfigError(
                f"ScalingConfig(resources_per_worker={self.resources_per_worker!r}) asks for "
                "GPUs but use_gpu=False: set use_gpu=True, or drop 'GPU' from "
                "resources_per_worker."
            )

    @property
    def worker_resources(self) -> Dict[str, float]:
        """The Ray resources of one worker's bundle."""
        res = dict(self.resources_per_worker or {})
        res.setdefault("CPU", 1)
        if self.use_gpu:
            res.setdefault("GPU", 1)
        return {k: float(v) for k, v in res.items() if v}

    @property
    def total_resources(self) -> Dict[str, float]:
        total: Dict[str, float] = {}
        for key, value in self.worker_resources.items():
            total[key] = total.get(key, 0.0) + value * self.num_workers
        for key, value in (self.trainer_resources or {}).items():
            total[key] = total.get(key, 0.0) + float(value)
        return total


@dataclass
class CheckpointConfig:
    """Which checkpoints to keep.

    Args:
        num_to_keep: Keep this many best checkpoints (plus the latest until a newer one
            arrives). ``None`` keeps all; ``0`` writes none.
        checkpoint_score_attribute: Metric ranking checkpoints; ``None`` ranks by age.
        checkpoint_score_order: ``"max"`` or ``"min"``.
        checkpoint_frequency: For trainers with a built-in loop (XGBoost, LightGBM,
            RLlib): checkpoint every this many iterations; ``0`` (default) leaves it to
            the trainer's own setting. A ``train_loop_per_worker`` checkpoints when it
            calls ``report(..., checkpoint=...)``, so it cannot take one.
        checkpoint_at_end: For trainers with a built-in loop: checkpoint the last
            iteration (``None``: the trainer's own setting, True for all of them).
    """

    num_to_keep: Optional[int] = None
    checkpoint_score_attribute: Optional[str] = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: Optional[bool] = None

    def __post_init__(self) -> None:
        if self.num_to_keep is not None and (
            not isinstance(self.num_to_keep, int) or self.num_to_keep < 0
        ):
            raise ConfigError(
                f"CheckpointConfig(num_to_keep={self.num_to_keep!r}) is invalid: use None "
                "(keep all), 0 (write none) or a positive integer."
            )
        if self.checkpoint_score_attribute is not None and not isinstance(
                self.checkpoint_score_attribute, str):
            raise ConfigError(
                f"CheckpointConfig(checkpoint_score_attribute="
                f"{self.checkpoint_score_attribute!r}) is invalid: name a reported metric, "
                "e.g. 'loss' (nested metrics as 'val/acc'), or None to rank by age.")
        if self.checkpoint_score_order not in _SCORE_ORDERS:
            raise ConfigError(
                f"CheckpointConfig(checkpoint_score_order={self.checkpoint_score_order!r}) "
                "is unknown: use 'max' or 'min'."
            )
        freq = self.checkpoint_frequency
        if isinstance(freq, bool) or not isinstance(freq, int) or freq < 0:
            raise ConfigError(
                f"CheckpointConfig(checkpoint_frequency={freq!r}) is invalid: use an "
                "integer >= 0 (0: only the trainer's own checkpoints).")
        if self.checkpoint_at_end not in (None, True, False):
            raise ConfigError(
                f"CheckpointConfig(checkpoint_at_end={self.checkpoint_at_end!r}) is "
                "invalid: use True, False or None (the trainer's default).")

    @property
    def sets_builtin_loop(self) -> bool:
        """Whether ``checkpoint_frequency`` or ``checkpoint_at_end`` was given."""
        return self.checkpoint_frequency != 0 or self.checkpoint_at_end is not None

    def builtin_loop_checkpointing(self, trainer: str, frequency: int, at_end: bool
                                   ) -> Tuple[int, bool]:
        """A built-in loop's ``(frequency, at_end)``: these fields where given (Ray's
        place for them), else the trainer's own arguments (``trainer`` names it)."""
        freq = self.checkpoint_frequency or frequency
        end = at_end if self.checkpoint_at_end is None else self.checkpoint_at_end
        return freq, end


@dataclass
class FailureConfig:
    """How many times to restart the worker group after a failure.

    Args:
        max_failures: Retries before ``fit()`` raises; ``-1`` retries forever,
            ``0`` fails at the first error.
        fail_fast: In a Tuner, end the experiment at the first trial that fails: the
            running trials stop and no new one starts (``fit()`` returns the results);
            ``"raise"`` also raises that trial's error from ``fit()``. A failing run is
            not retried (it implies ``max_failures=0``, as in Ray).
    """

    max_failures: int = 0
    fail_fast: Union[bool, str] = False

    def __post_init__(self) -> None:
        if self.fail_fast not in (True, False, "raise"):
            raise ConfigError(
                f"FailureConfig(fail_fast={self.fail_fast!r}) is invalid: use True, False "
                "or 'raise'.")
        if self.fail_fast and self.max_failures not in (0, None):
            raise ConfigError(
                f"FailureConfig(fail_fast={self.fail_fast!r}, max_failures="
                f"{self.max_failures!r}): a fail-fast run is not retried; drop "
                "max_failures or set it to 0.")
        if not isinstance(self.max_failures, int) or self.max_failures < -1:
            raise ConfigError(
                f"FailureConfig(max_failures={self.max_failures!r}) is invalid: use -1 "
                "(retry forever), 0 (fail at once) or a positive number of retries."
            )
        if self.fail_fast:
            self.max_failures = 0

    def allows_retry(self, failures_so_far: int) -> bool:
        return self.max_failures == -1 or failures_so_far < self.max_failures


@dataclass(repr=False)
class RunConfig:
    """Where and how a run is recorded.

    Args:
        name: Run name; re-running ``fit()`` with the same name and storage resumes the
            run. Defaults to a fresh unique name per ``fit()``.
        storage_path: Local absolute path or URI (``s3://bucket/prefix``,
            ``memory://``) holding run directories. Defaults to
            ``$TRAINYARD_STORAGE_PATH`` or ``~/trainyard_results``.
        checkpoint_config: Checkpoint retention.
        failure_config: Retries.
        callbacks: Driver-side callbacks.
        verbose: 0 silent, 1 a line per report, 2 more detail (``False``/``True`` and
            Ray's 3 are taken: 0, 1 and 2).
        storage_filesystem: A ``pyarrow.fs.FileSystem`` to use instead of one inferred
            from ``storage_path`` (e.g. S3 with an ``endpoint_override``).
        metrics_reduce: Reduce a metric across all ranks each round, e.g.
            ``{"loss": "mean", "samples": "sum"}`` (``mean``, ``sum``, ``min``, ``max``);
            the values are added next to rank 0's as ``loss_mean``, ``samples_sum``.
        stop: When to stop early (as Ray Tune): a dict ``{"metric": value}`` (stop once
            any metric reaches its value, e.g. ``{"training_iteration": 10}``), a function
            ``f(trial_id, result) -> bool``, or an ``engine.tune.stopper.Stopper``. A stop
            ends the run as finished, keeping its checkpoints; in a Tuner it applies to
            every trial.
        log_to_file: Write each worker's stdout and stderr (what Python code prints)
            to files in the run directory, as Ray Tune does: ``True`` (files ``stdout``
            and ``stderr``), one file name (both streams into it), or a tuple
            ``(stdout_name, stderr_name)``. Rank 0 writes the names given; rank ``r``
            > 0 writes ``<name>.rank<r>``. The output still reaches the console.
    """

    name: Optional[str] = None
    storage_path: Optional[str] = None
    checkpoint_config: Optional[CheckpointConfig] = None
    failure_config: Optional[FailureConfig] = None
    callbacks: Optional[List[Any]] = None
    verbose: int = 1
    storage_filesystem: Any = None
    metrics_reduce: Optional[Dict[str, str]] = None
    stop: Any = None
    log_to_file: Union[bool, str, Tuple[str, str]] = False

    def __post_init__(self) -> None:
        _check_metrics_reduce(self.metrics_reduce)
        log_file_names(self.log_to_file)
        _check_stop(self.stop)
        if self.checkpoint_config is None:
            self.checkpoint_config = CheckpointConfig()
        if self.failure_config is None:
            self.failure_config = FailureConfig()
        if self.callbacks is None:
            self.callbacks = []
        for name, cls in (("checkpoint_config", CheckpointConfig),
                          ("failure_config", FailureConfig)):
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise ConfigError(
                    f"RunConfig({name}={value!r}) is invalid: pass a {cls.__name__}, e.g. "
                    f"RunConfig({name}={cls.__name__}(...))"
                    + (f" ({cls.__name__}(**your_dict) converts a dict)."
                       if isinstance(value, dict) else "."))
        _check_callbacks(self.callbacks)
        if isinstance(self.verbose, bool):  # Ray takes verbose=False / True
            self.verbose = int(self.verbose)
        if not isinstance(self.verbose, int) or self.verbose not in (0, 1, 2, 3):
            raise ConfigError(
                f"RunConfig(verbose={self.verbose!r}) is invalid: use 0 (silent), 1 (a "
                "status line) or 2 (a line per report); 3 (Ray's most detail) is 2.")
        self.verbose = min(self.verbose, 2)
        if self.storage_path is not None:
            if not isinstance(self.storage_path, (str, os.PathLike)):
                raise ConfigError(
                    f"RunConfig(storage_path={self.storage_path!r}) is invalid: use an "
                    "absolute local path or a URI such as s3://bucket/prefix.")
            self.storage_path = os.fspath(self.storage_path)  # pathlib.Path is welcome
        if self.name is not None:
            if not isinstance(self.name, str) or not self.name.strip() \
                    or "/" in self.name or self.name in (".", ".."):
                raise ConfigError(
                    f"RunConfig(name={self.name!r}) is invalid: use a non-empty name "
                    "without '/'."
                )


    def __repr__(self) -> str:
        shown = redact(self.storage_path) if self.storage_path else None
        return (f"RunConfig(name={self.name!r}, storage_path={shown!r}, "
                f"checkpoint_config={self.checkpoint_config!r}, "
                f"failure_config={self.failure_config!r}, callbacks={self.callbacks!r}, "
                f"verbose={self.verbose!r}, metrics_reduce={self.metrics_reduce!r}"
                + (f", stop={self.stop!r}" if self.stop is not None else "")
                + (f", log_to_file={self.log_to_file!r})" if self.log_to_file else ")"))


def log_file_names(log_to_file: Any) -> Optional[Tuple[str, str]]:
    """``RunConfig(log_to_file=...)`` as ``(stdout_name, stderr_name)``, or None when
    off; the same name twice means one file for both streams.

    Raises:
        ConfigError: anything but a bool, a file name or a pair of file names.
    """
    if log_to_file is False or log_to_file is None:
        return None
    if log_to_file is True:
        return ("stdout", "stderr")
    names = (log_to_file, log_to_file) if isinstance(log_to_file, str) else log_to_file
    if isinstance(names, list):
        names = tuple(names)
    if not (isinstance(names, tuple) and len(names) == 2
            and all(isinstance(n, str) and n.strip() for n in names)):
        raise ConfigError(
            f"RunConfig(log_to_file={log_to_file!r}) is invalid: use True, a file name "
            "('output.log') or a pair of names ('out.log', 'err.log').")
    for name in names:
        if os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):
            raise ConfigError(
                f"RunConfig(log_to_file={log_to_file!r}): {name!r} must be a name inside "
                "the run directory (no absolute path, no '..').")
    return names


def _check_stop(stop: Any) -> None:
    """A dict of metric thresholds, a function or a Stopper (any callable; a Stopper is
    recognised by duck typing, as engine.tune.stopper sits above this module)."""
    if stop is None:
        return
    if isinstance(stop, type):
        raise ConfigError(f"RunConfig(stop={stop.__name__}) passes the class: pass an "
                          f"instance, e.g. {stop.__name__}(...).")
    if isinstance(stop, dict):
        for key, value in stop.items():
            if not isinstance(key, str) or isinstance(value, dict):
                raise ConfigError(
                    f"RunConfig(stop={stop!r}) is invalid: use flat metric names (nested "
                    "ones as 'val/acc') mapped to numbers, e.g. {'training_iteration': 10}.")
            if not isinstance(value, (int, float)):  # True: {"done": True}, as in Ray
                raise ConfigError(
                    f"RunConfig(stop={{{key!r}: {value!r}}}) is invalid: the value must be "
                    "a number (the run stops once the metric reaches it).")
        return
    if not callable(stop):
        raise ConfigError(
            f"RunConfig(stop={stop!r}) is invalid: use a dict like "
            "{'training_iteration': 10}, a function f(trial_id, result) -> bool, or a "
            "Stopper from engine.tune.stopper.")


def _check_callbacks(callbacks: Any) -> None:
    if not isinstance(callbacks, (list, tuple)):
        raise ConfigError(
            f"RunConfig(callbacks={callbacks!r}) is invalid: pass a list, e.g. "
            "RunConfig(callbacks=[MyCallback()]).")
    for cb in callbacks:
        if isinstance(cb, type):
            raise ConfigError(
                f"RunConfig(callbacks=[{cb.__name__}]) passes the class: pass an instance, "
                f"{cb.__name__}().")
        if not _has_hooks(cb):
            raise ConfigError(
                f"RunConfig(callbacks=[..., {cb!r}]) is invalid: callbacks are instances of "
                "engine.callbacks.Callback (or LoggerCallback) subclasses.")


def _has_hooks(obj: Any) -> bool:
    """Whether ``obj`` has a callback hook (``on_*``, ``log_trial_*``) as every
    ``engine.callbacks.Callback`` does; the runner calls any hook that it has."""
    cls = type(obj)
    return any(name.startswith(_HOOK_PREFIXES) and callable(getattr(cls, name, None))
               for name in dir(cls))


def _check_metrics_reduce(spec: Any) -> None:
    if spec is None:
        return
    if not isinstance(spec, dict) or not all(
            isinstance(k, str) and v in METRICS_REDUCE_OPS for k, v in spec.items()):
        raise ConfigError(
            f"RunConfig(metrics_reduce={spec!r}) is invalid: use a dict of metric name to "
            f"one of {', '.join(METRICS_REDUCE_OPS)}, e.g. {{'loss': 'mean', 'samples': 'sum'}}."
        )


@dataclass
class DataConfig:
    """Which datasets are split across workers.

    Args:
        datasets_to_split: ``"all"`` or a list of dataset names; the others are given
            whole to every worker (the usual choice for validation).
    """

    datasets_to_split: Union[str, List[str]] = "all"

    def __post_init__(self) -> None:
        if search_markers(self):  # a Tuner's param_space: checked once resolved per trial
            return
        value = self.datasets_to_split
        if not (value == "all" or (isinstance(value, (list, tuple, set)) and all(
                isinstance(n, str) for n in value))):
            raise ConfigError(
                f"DataConfig(datasets_to_split={self.datasets_to_split!r}) is invalid: use "
                "'all' or a list of dataset names."
            )

    def should_split(self, name: str) -> bool:
        return self.datasets_to_split == "all" or name in self.datasets_to_split


def score_is_better(a: float, b: float, order: str) -> bool:
    """True when score ``a`` ranks above ``b``; NaN always ranks worst."""
    if isinstance(a, float) and math.isnan(a):
        return False
    if isinstance(b, float) and math.isnan(b):
        return True
    return a > b if order == "max" else a < b


__all__ = [
    "ScalingConfig",
    "RunConfig",
    "CheckpointConfig",
    "FailureConfig",
    "DataConfig",
]
