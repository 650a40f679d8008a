"""What ``train`` and ``tune`` share: settings from JSON, the engine's configs, refs."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from engine.exceptions import ConfigError
from engine.storage import default_root, redact
from tasks import layout
from tasks.refs import CheckpointRef, DatasetRef

# Data sets up to this many cells (rows × columns) are read into this process where that
# is cheaper than a Ray Data job: fitting a preprocessor, evaluation.
IN_PROCESS_MAX_CELLS = 20_000_000
_SPACE_KINDS = ("grid_search", "choice", "uniform", "quniform", "loguniform", "randint")
_TUNE_KEYS = ("num_samples", "metric", "mode", "scheduler", "max_t", "grace_period",
              "reduction_factor", "max_concurrent_trials", "seed", "time_budget_s")
_SCALING_KEYS = ("num_workers", "use_gpu", "resources_per_worker", "placement_strategy")


@dataclass
class RunSettings:
    """The ``run`` argument of ``train``/``tune``: a dict with these keys.

    Args:
        name: Engine run name; the same name resumes that run (orchestrators use
            ``run_name_for(run_id, task_name)``). None: a fresh name.
        storage: Pipeline storage root (runs go to ``<storage>/runs/<name>``).
        config: Hyperparameters over the pipeline's defaults.
        max_failures: Worker-group restarts inside the engine before the task fails
            (0: the failure reaches the orchestrator at once, which retries the task).
        num_to_keep: Checkpoints kept (best by the pipeline's metric, plus the latest).
        verbose: Engine progress output (0 silent, 1 a line per report).
        execution: ``local`` (this process drives Ray) or ``ray_job`` (the step runs as
            a job on the Ray cluster at ``$TRAINYARD_RAY_JOB_ADDRESS``); default
            ``$TRAINYARD_EXECUTION`` or ``local`` (see ``tasks.ray_jobs``).
        runtime_env: Ray's runtime_env of the job in ``ray_job`` mode (``working_dir``,
            ``py_modules``, ``pip``, ``env_vars``); default the cluster's installation.
    """

    name: Optional[str] = None
    storage: Optional[str] = None
    config: Dict[str, Any] = field(default_factory=dict)
    max_failures: int = 0
    num_to_keep: Optional[int] = 2
    verbose: int = 1
    execution: Optional[str] = None
    runtime_env: Optional[Dict[str, Any]] = None

    @classmethod
    def parse(cls, run: Optional[Mapping[str, Any]]) -> "RunSettings":
        if run is None:
            return cls()
        if isinstance(run, cls):
            return run
        if not isinstance(run, Mapping):
            raise ConfigError(f"run must be a dict like {{'name': ..., 'storage': ..., "
                              f"'config': {{...}}}}, got {type(run).__name__}.")
        unknown = sorted(set(run) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"run has unknown keys {unknown}: use "
                              f"{sorted(cls.__dataclass_fields__)}.")
        out = cls(**dict(run))
        if not isinstance(out.config, dict):
            raise ConfigError("run['config'] must be a dict of hyperparameters.")
        return out

    def run_config(self, spec: Any, name: Optional[str] = None) -> Any:
        from engine import CheckpointConfig, FailureConfig, RunConfig

        return RunConfig(
            name=name or self.name,
            storage_path=layout.sub(default_root(self.storage), layout.RUNS_DIR),
            checkpoint_config=CheckpointConfig(
                num_to_keep=self.num_to_keep, checkpoint_score_attribute=spec.metric,
                checkpoint_score_order=spec.mode),
            failure_config=FailureConfig(max_failures=self.max_failures),
            verbose=self.verbose)


def scaling_config(scaling: Any) -> Any:
    """A ``ScalingConfig`` from a dict (``{"num_workers": 2}``) or a ScalingConfig."""
    from engine import ScalingConfig

    if scaling is None:
        return ScalingConfig(num_workers=2)
    if isinstance(scaling, ScalingConfig):
        return scaling
    if not isinstance(scaling, Mapping):
        raise ConfigError(f"scaling must be a dict like {{'num_workers': 2}}, got "
                          f"{type(scaling).__name__}.")
    unknown = sorted(set(scaling) - set(_SCALING_KEYS))
    if unknown:
        raise ConfigError(f"scaling has unknown keys {unknown}: use {list(_SCALING_KEYS)}.")
    return ScalingConfig(**dict(scaling))


def train_datasets(datasets: Mapping[str, Any]) -> Dict[str, DatasetRef]:
    if not isinstance(datasets, Mapping) or "train" not in datasets:
        raise ConfigError("datasets must be a dict with a 'train' data set (and usually "
                          "'validation'), e.g. the output of split().")
    return {k: DatasetRef.from_dict(v) for k, v in datasets.items()}


def trainer_metadata(spec: Any, refs: Dict[str, DatasetRef]) -> Dict[str, Any]:
    """The model card's metadata: feature and label columns, task, data fingerprint."""
    train_ref = refs["train"]
    spec.check_columns(train_ref.columns, "the training data")
    return {"feature_columns": [c for c in train_ref.schema if c != spec.label_column],
            "label_column": spec.label_column, "task": spec.task, "pipeline": spec.name,
            "data_fingerprint": train_ref.fingerprint}


def build_trainer(spec: Any, refs: Dict[str, DatasetRef], config: Dict[str, Any],
                  scaling: Any, run_config: Any) -> Any:
    trainer = spec.make_trainer(config=config, datasets={k: v.uri for k, v in refs.items()},
                                scaling_config=scaling_config(scaling), run_config=run_config,
                                metadata=trainer_metadata(spec, refs))
    preprocessor = getattr(trainer, "preprocessor", None)
    train_ref = refs["train"]
    if preprocessor is not None and not preprocessor.fitted \
            and train_ref.num_rows * len(train_ref.schema) <= IN_PROCESS_MAX_CELLS:
        # Small data: fit here from pandas, not with a Ray Data job per fit() and trial.
        from tasks.sources.files import read_pandas

        preprocessor.fit(read_pandas(train_ref))
    return trainer


def checkpoint_ref(spec: Any, result: Any, config: Dict[str, Any],
                   refs: Dict[str, DatasetRef], storage: Optional[str]) -> CheckpointRef:
    """The reference of a finished run's latest checkpoint."""
    from engine import constants

    ckpt = result.checkpoint
    if ckpt is None:
        raise ConfigError(f"Run {result.path!r} finished without a checkpoint: the pipeline's "
                          "train function must report one.")
    metrics = {k: v for k, v in (result.metrics or {}).items()
               if k not in constants.AUTOMATIC_FIELDS or k == "training_iteration"}
    return CheckpointRef(
        uri=ckpt.uri, framework=spec.framework, metrics=json_safe(metrics),
        config=json_safe(config), run_name=result.path.rstrip("/").rsplit("/", 1)[-1],
        created_at=time.time(), data_fingerprint=refs["train"].fingerprint,
        pipeline=spec.name, run_uri=result.path,
        storage=redact(default_root(storage)), data_uri=refs["train"].uri)


def parse_param_space(space: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """A search space from its JSON form: each value is a constant or a one-key dict
    ``{"grid_search": [...]}``, ``{"choice": [...]}``, ``{"uniform": [lo, hi]}``,
    ``{"quniform": [lo, hi, q]}``, ``{"loguniform": [lo, hi]}``, ``{"randint": [lo, hi]}``
    (engine.tune objects pass through)."""
    from engine import tune

    out: Dict[str, Any] = {}
    for key, value in dict(space or {}).items():
        if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _SPACE_KINDS:
            kind, args = next(iter(value.items()))
            if not isinstance(args, (list, tuple)):
                raise ConfigError(f"param_space[{key!r}] = {value!r}: {kind} takes a list.")
            out[key] = getattr(tune, kind)(list(args)) if kind in ("grid_search", "choice") \
                else getattr(tune, kind)(*args)
        elif isinstance(value, dict) and any(k in _SPACE_KINDS for k in value):
            raise ConfigError(f"param_space[{key!r}] = {value!r}: use exactly one of "
                              f"{list(_SPACE_KINDS)} per parameter.")
        else:
            out[key] = value
    return out


def trial_rows(grid: Any, metric: str, config_of: Any) -> List[Dict[str, Any]]:
    """One JSON row per trial: id, status, its sampled config, the metric, iterations,
    error."""
    rows = []
    for result in grid:
        row: Dict[str, Any] = {"trial_id": result.metrics.get("trial_id"),
                               "status": "ERROR" if result.error else "TERMINATED"}
        for key, value in sorted(config_of(result).items()):
            if isinstance(value, (int, float, str, bool)) or value is None:
                row[f"config/{key}"] = value
        row[metric] = finite_or_none(metric_value(result.metrics, metric))
        row["training_iteration"] = result.metrics.get("training_iteration")
        row["error"] = None if result.error is None else str(result.error).splitlines()[0]
        rows.append(json_safe(row))
    return rows


def metric_value(metrics: Optional[Mapping[str, Any]], name: str) -> Any:
    """``metrics[name]``, reaching into nested dicts for ``a/b`` (SklearnTrainer reports
    ``{"validation": {"test_score": ...}}``, which a pipeline names
    ``validation/test_score``)."""
    node: Any = metrics or {}
    if name in node:
        return node[name]
    for part in name.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def best_result(grid: Any, metric: str, mode: str) -> Any:
    """The trial with the best last ``metric``; nested metrics (``a/b``) too."""
    if "/" not in metric:
        return grid.get_best_result(metric, mode)
    scored = [(metric_value(r.metrics, metric), r) for r in grid if r.error is None]
    scored = [(v, r) for v, r in scored
              if isinstance(v, (int, float)) and finite_or_none(float(v)) is not None]
    if not scored:
        raise ConfigError(f"No trial reported the metric {metric!r}: set the pipeline's "
                          "metric to one its trainer reports.")
    pick = max if mode == "max" else min
    return pick(scored, key=lambda pair: pair[0])[1]


def json_safe(value: Any) -> Any:
    """JSON values only: numpy scalars and arrays converted, NaN/inf kept as floats,
    anything else as its repr."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return json_safe(tolist())
    if isinstance(value, (int, float)) or hasattr(value, "__float__"):
        try:
            f = float(value)
            return int(f) if f.is_integer() and "int" in type(value).__name__ else f
        except (TypeError, ValueError):
            pass
    return repr(value)


def finite_or_none(value: Any) -> Any:
    return value if not (isinstance(value, float) and not math.isfinite(value)) else None


def tune_config(spec: Any, options: Optional[Mapping[str, Any]]) -> Any:
    """A ``TuneConfig`` from the JSON options of ``tasks.tune``."""
    from engine.tune import ASHAScheduler, TuneConfig

    opts = dict(options or {})
    unknown = sorted(set(opts) - set(_TUNE_KEYS))
    if unknown:
        raise ConfigError(f"tune_config has unknown keys {unknown}: use {list(_TUNE_KEYS)}.")
    metric, mode = opts.pop("metric", spec.metric), opts.pop("mode", spec.mode)
    kind = str(opts.pop("scheduler", "fifo")).lower()
    asha = {k: opts.pop(k) for k in ("max_t", "grace_period", "reduction_factor") if k in opts}
    if kind == "asha":
        scheduler = ASHAScheduler(**asha)
    elif kind == "fifo" and not asha:
        scheduler = None
    else:
        raise ConfigError(f"tune_config scheduler {kind!r}: use 'fifo' or 'asha' (max_t, "
                          "grace_period and reduction_factor belong to 'asha').")
    return TuneConfig(metric=metric, mode=mode, scheduler=scheduler, **opts)
