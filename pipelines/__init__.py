"""Model and pipeline definitions that tasks, flows and DAGs run.

A pipeline is a :class:`PipelineSpec`: its default data source, label column, the metric
it is judged by, default hyperparameters and a small search space, and what is
model-specific — a train function, or the parameters of a GBDT / scikit-learn model
(``make_trainer`` and the rest have a default for each framework).

    from pipelines import get_pipeline
    spec = get_pipeline("digits")
    spec.source, spec.label_column, spec.metric     # 'sklearn:digits', 'target', 'accuracy'

Pipelines are plugins. They are found through the ``trainyard.pipelines`` entry-point
group of installed distributions (trainyard's own two as well), and through
``$TRAINYARD_PIPELINES="name=module:attr,..."`` for code on the path but not installed;
``register_pipeline(spec)`` adds one to this process only. Finding them imports nothing:
a pipeline's module is imported when it is first asked for, and a plugin that fails to
load never breaks the others (``pipeline_entries()`` lists each with its error).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

from pipelines import _defaults, _plugins
from pipelines._plugins import (ENTRY_POINT_GROUP, PIPELINES_ENV_VAR, PipelineEntry,
                                PipelinePluginError, refresh)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_FRAMEWORK_DEFAULT = "<framework default>"


class UnknownPipelineError(KeyError):
    """No pipeline of that name is registered."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class _Default:
    """A spec's default function, bound to the spec (rebound by ``dataclasses.replace``)."""

    def __init__(self, fn: Callable[..., Any], spec: "PipelineSpec") -> None:
        self.fn, self.spec = fn, spec

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(self.spec, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<default {self.fn.__name__} of {self.spec.name!r}>"


@dataclass(frozen=True)
class PipelineSpec:
    """What tasks need to know about one model.

    A minimal tabular pipeline names its data, label and framework, and either a train
    function (torch, tensorflow) or the model's parameters (xgboost, lightgbm, sklearn):

        PipelineSpec(name="churn", source="/data/churn.csv", label_column="churned",
                     framework="xgboost", params={"max_depth": 4})
        PipelineSpec(name="moons", source=..., label_column="label", framework="torch",
                     train_func=train_func, model=build_model)   # train_func(config, data)

    Args:
        name: Registry name (``digits``): letters, digits, ``_``, ``-``, ``.``.
        description: One line for ``trainyard pipelines``.
        framework: ``torch``, ``tensorflow``, ``xgboost``, ``lightgbm``, ``sklearn`` (any
            model card framework with your own ``make_trainer``).
        source: Default data source for ``ingest`` (``sklearn:digits``, an absolute path,
            a URI).
        label_column: The column to predict.
        make_trainer: ``f(config, datasets, scaling_config, run_config, metadata)`` → a
            trainer; ``config`` is the flat hyperparameters, ``datasets`` maps
            ``train``/``validation`` to Parquet URIs. Default: the framework's (see
            ``pipelines._defaults``).
        task: ``classification`` or ``regression``.
        metric, mode: The validation metric the trainer reports, which tuning optimises
            and checkpoints are ranked by. Default: ``val_accuracy``/``val_loss`` (torch,
            tensorflow), ``validation-<first eval metric>`` (xgboost, lightgbm),
            ``validation/test_score`` (sklearn), ``accuracy`` with your own trainer.
        defaults: Flat default hyperparameters (``{"lr": 3e-3, "epochs": 15}``).
        param_space: The default small search, in the JSON form
            ``tasks.parse_param_space`` reads (``{"lr": {"loguniform": [1e-3, 1e-2]}}``).
        epochs_key: The hyperparameter that counts epochs / boosting rounds. Default
            ``epochs``, ``num_boost_round`` for GBDTs, None for scikit-learn (no epochs).
        gate: The default promotion gate: ``{"accuracy": ">=0.9"}``, or a floor and
            not worse than the current model on the same data:
            ``{"accuracy": [">=0.9", ">=champion"]}`` (see ``tasks.promote``).
        tune_space: ``f(flat_space)`` → the Tuner's ``param_space`` for that trainer.
        config_of: ``f(result)`` → the flat hyperparameters a tuning trial sampled.
        predictor_kwargs: ``f(config)`` → keyword arguments of the framework
            predictor's ``from_checkpoint`` (default: ``model=model(config)`` when
            ``model`` is set; ``allow_pickle=True`` for scikit-learn).
        train_func: torch/tensorflow: ``f(config, data)`` run on every worker, ``data`` a
            :class:`pipelines.tabular.TabularData`; it reports ``metric`` and checkpoints.
        model: ``f(config)`` → the torch module (or Keras model) a checkpoint's weights
            are loaded into for prediction.
        params: xgboost/lightgbm: the booster's fixed parameters (default objective and
            evaluation metrics by task); sklearn: fixed estimator parameters.
        estimator: sklearn: the estimator class or factory, or ``"module:Class"``.
        preprocessor: ``f(feature_columns)`` → an unfitted ``engine.preprocessors``
            preprocessor, fitted on the training split and saved with every checkpoint.
        data_schema: The data the pipeline expects, in ``tasks.validate``'s JSON form
            (``{"columns": {name: {"type", "nullable", "min", "max", "isin"}},
            "strict"}``); ``validate`` checks every ingested data set against it.
            None: no schema checks.
        drift: Drift settings of ``validate`` over its defaults: ``{"method": "psi" |
            "ks", "threshold": 0.2, "fail": False, "bins": 10, "columns": None}``.
    """

    name: str
    description: str = ""
    framework: str = ""
    source: str = ""
    label_column: str = ""
    make_trainer: Optional[Callable[..., Any]] = None
    task: str = "classification"
    metric: Optional[str] = None
    mode: Optional[str] = None
    defaults: Dict[str, Any] = field(default_factory=dict)
    param_space: Dict[str, Any] = field(default_factory=dict)
    epochs_key: Optional[str] = _FRAMEWORK_DEFAULT
    gate: Dict[str, Any] = field(default_factory=dict)
    tune_space: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None
    config_of: Optional[Callable[[Any], Dict[str, Any]]] = None
    predictor_kwargs: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None
    train_func: Optional[Callable[..., None]] = None
    model: Optional[Callable[[Dict[str, Any]], Any]] = None
    params: Dict[str, Any] = field(default_factory=dict)
    estimator: Union[str, Callable[[], Any], None] = None
    preprocessor: Optional[Callable[[List[str]], Any]] = None
    data_schema: Optional[Dict[str, Any]] = None
    drift: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        custom = self.make_trainer is not None and not isinstance(self.make_trainer, _Default)
        self._check(custom)
        self._set_default("make_trainer", _defaults.make_trainer, not custom)
        self._set_default("tune_space", _defaults.tune_space if not custom else _loop_space)
        self._set_default("config_of", _defaults.config_of if not custom else _loop_config)
        self._set_default("predictor_kwargs", _defaults.predictor_kwargs)
        if self.epochs_key == _FRAMEWORK_DEFAULT:
            object.__setattr__(self, "epochs_key", _defaults.epochs_key(self.framework)
                               if not custom else "epochs")
        if not custom and self.epochs_key and self.epochs_key not in self.defaults:
            object.__setattr__(self, "defaults", {
                self.epochs_key: _defaults.default_epochs(self.framework), **self.defaults})
        if self.metric is None:
            metric, mode = ("accuracy", "max") if custom else _defaults.metric_and_mode(self)
            object.__setattr__(self, "metric", metric)
            object.__setattr__(self, "mode", self.mode or mode)
        elif self.mode is None:
            object.__setattr__(self, "mode", "max")
        if self.mode not in ("min", "max"):
            raise ValueError(f"PipelineSpec({self.name!r}).mode must be 'min' or 'max'.")

    def check_columns(self, columns: List[str], what: str = "the data") -> None:
        """Fail before training when ``what`` lacks the label column.

        Raises:
            ConfigError: naming the pipeline, the columns there are, and the fix.
        """
        if self.label_column not in columns:
            from engine.exceptions import ConfigError

            raise ConfigError(
                f"Pipeline {self.name!r} predicts {self.label_column!r}, which {what} does "
                f"not have (columns: {list(columns)}): train on a source that has it "
                "(trainyard run --source, the flow's source, the DAG's source param), or "
                "set the PipelineSpec's label_column.")

    def _set_default(self, attr: str, fn: Callable[..., Any], default: bool = True) -> None:
        value = getattr(self, attr)
        if value is None or isinstance(value, _Default):
            object.__setattr__(self, attr, _Default(fn, self) if default else None)

    def _check(self, custom: bool) -> None:
        """Bad specs fail where they are written, with the field that fixes them."""
        where = f"PipelineSpec({self.name!r})"
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"{where}.name must be letters, digits, '_', '-' or '.' (it "
                             "names DAGs, runs and model aliases), e.g. 'churn_model'.")
        if self.task not in ("classification", "regression"):
            raise ValueError(f"{where}.task must be 'classification' or 'regression', got "
                             f"{self.task!r}.")
        missing = [f for f in ("framework", "source", "label_column") if not getattr(self, f)]
        if missing:
            raise ValueError(f"{where} needs {', '.join(missing)}: e.g. framework='xgboost', "
                             "source='/abs/path/data.csv', label_column='target'.")
        if custom:
            return
        if self.framework not in _defaults.FRAMEWORKS:
            raise ValueError(f"{where}.framework {self.framework!r} has no default trainer: "
                             f"use one of {list(_defaults.FRAMEWORKS)}, or pass make_trainer=.")
        if self.framework in ("torch", "tensorflow") and not callable(self.train_func):
            raise ValueError(f"{where} ({self.framework}) needs train_func=f(config, data), "
                             "the loop each worker runs (or pass make_trainer=).")
        if self.framework == "sklearn" and not (callable(self.estimator)
                                                or isinstance(self.estimator, str)):
            raise ValueError(f"{where} (sklearn) needs estimator=, e.g. "
                             "'sklearn.ensemble:RandomForestClassifier' (or make_trainer=).")


def _loop_space(spec: PipelineSpec, space: Dict[str, Any]) -> Dict[str, Any]:
    return {"train_loop_config": space}


def _loop_config(spec: PipelineSpec, result: Any) -> Dict[str, Any]:
    return dict((result.config or {}).get("train_loop_config") or {})


# --- the registry -------------------------------------------------------------------------
# Specs registered in this process (register_pipeline), and those loaded from plugins.
_REGISTERED: Dict[str, PipelineSpec] = {}
_LOADED: Dict[tuple, PipelineSpec] = {}


def register_pipeline(spec: PipelineSpec, replace: bool = False) -> None:
    """Make ``spec`` available to ``get_pipeline(spec.name)`` in this process (and to
    every task it runs). To reach other processes (a CLI, an Airflow task, a Prefect
    worker), declare it as an entry point or in ``$TRAINYARD_PIPELINES`` instead."""
    if not isinstance(spec, PipelineSpec):
        raise TypeError(f"register_pipeline() takes a PipelineSpec, got "
                        f"{type(spec).__name__}.")
    if spec.name in list_pipelines() and not replace:
        raise ValueError(f"A pipeline named {spec.name!r} is registered already: pass "
                         "replace=True to replace it.")
    _REGISTERED[spec.name] = spec


def _entries() -> Dict[str, PipelineEntry]:
    found = _plugins.discover()
    for name in _REGISTERED:
        found[name] = PipelineEntry(name, None, "register_pipeline()")
    return found


def pipeline_entry(name: str) -> Optional[PipelineEntry]:
    """Where the pipeline called ``name`` is declared (its distribution and version, the
    environment variable, or ``register_pipeline()``), without importing it; None when
    there is no such pipeline."""
    return _entries().get(name)


def list_pipelines() -> List[str]:
    """Every pipeline name found (including plugins that fail to load)."""
    return sorted(_entries())


def get_pipeline(name: Union[str, PipelineSpec]) -> PipelineSpec:
    """The pipeline called ``name`` (a spec is returned as it is).

    Raises:
        UnknownPipelineError: no such pipeline (the message lists the known ones).
        PipelinePluginError: its plugin cannot be loaded (the message names the fix).
    """
    if isinstance(name, PipelineSpec):
        return name
    if name in _REGISTERED:
        return _REGISTERED[name]
    entry = _entries().get(name)
    if entry is None:
        raise UnknownPipelineError(
            f"Unknown pipeline {name!r}: use one of {list_pipelines()}, or add yours: an "
            f"entry point in the group {ENTRY_POINT_GROUP!r} of an installed package "
            f"(trainyard new-pipeline {name} writes one), or "
            f"{PIPELINES_ENV_VAR}='{name}=module:SPEC'.")
    key = (entry.name, entry.target, entry.origin)
    if key not in _LOADED:
        _LOADED[key] = _plugins.load(entry, PipelineSpec)
    return _LOADED[key]


def pipeline_entries() -> List[Dict[str, Any]]:
    """Every pipeline with where it comes from, loaded: JSON rows with ``name``,
    ``origin``, ``distribution``, ``version``, ``target``, ``framework``, ``source``,
    ``metric``, ``mode``, ``description``, and ``error`` (why it cannot load, or None)."""
    rows = []
    for name, entry in sorted(_entries().items()):
        try:
            rows.append(_plugins.loaded_summary(entry, get_pipeline(name)))
        except (PipelinePluginError, UnknownPipelineError) as exc:
            row = _plugins.loaded_summary(entry, None)
            row["error"] = str(exc)
            rows.append(row)
    return rows


__all__ = ["PipelineSpec", "get_pipeline", "list_pipelines", "register_pipeline",
           "pipeline_entries", "pipeline_entry", "PipelineEntry", "refresh", "UnknownPipelineError", "PipelinePluginError",
           "ENTRY_POINT_GROUP", "PIPELINES_ENV_VAR"]
