"""Model and pipeline definitions that tasks, flows and DAGs run.

A pipeline is a :class:`PipelineSpec`: its default data source, label column, the metric
it is judged by, default hyperparameters and a small search space, and three functions
that hold everything model-specific — build the trainer, map a flat search space onto
the trainer's settings, and give the predictor what it needs to load a checkpoint.

    from pipelines import get_pipeline
    spec = get_pipeline("digits")
    spec.source, spec.label_column, spec.metric     # 'sklearn:digits', 'target', 'accuracy'

Pipelines register lazily (``"module:ATTRIBUTE"``), so importing this package imports no
framework. ``register_pipeline(spec)`` adds your own.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union


class UnknownPipelineError(KeyError):
    """No pipeline of that name is registered."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


@dataclass(frozen=True)
class PipelineSpec:
    """What tasks need to know about one model.

    Args:
        name: Registry name (``digits``).
        description: One line for ``trainyard`` listings.
        framework: The model card's framework (``torch``, ``xgboost``).
        source: Default data source for ``ingest`` (``sklearn:digits``, a path, a URI).
        label_column: The column to predict.
        task: ``classification`` or ``regression``.
        metric, mode: The validation metric the train function reports, which tuning
            optimises and checkpoints are ranked by.
        defaults: Flat default hyperparameters (``{"lr": 3e-3, "epochs": 15}``).
        param_space: The default small search, in the JSON form
            ``tasks.core.parse_param_space`` reads (``{"lr": {"loguniform": [1e-3, 1e-2]}}``).
        epochs_key: The hyperparameter that counts epochs / boosting rounds.
        gate: The default promotion gate (``{"accuracy": ">=0.9"}``).
        make_trainer: ``f(config, datasets, scaling_config, run_config, metadata)`` → a
            trainer; ``config`` is the flat hyperparameters, ``datasets`` maps
            ``train``/``validation`` to Parquet URIs.
        tune_space: ``f(flat_space)`` → the Tuner's ``param_space`` for that trainer.
        config_of: ``f(result)`` → the flat hyperparameters a tuning trial sampled
            (its ``Result.config`` is the trial's ``param_space`` sample).
        predictor_kwargs: ``f(config)`` → keyword arguments of the framework
            predictor's ``from_checkpoint`` (e.g. ``model=`` for torch).
        data_schema: The data the pipeline expects, in ``tasks.validate``'s JSON form
            (``{"columns": {name: {"type", "nullable", "min", "max", "isin"}},
            "strict"}``); ``validate`` checks every ingested data set against it.
            None: no schema checks.
        drift: Drift settings of ``validate`` over its defaults: ``{"method": "psi" |
            "ks", "threshold": 0.2, "fail": False, "bins": 10, "columns": None}``.
    """

    name: str
    description: str
    framework: str
    source: str
    label_column: str
    make_trainer: Callable[..., Any]
    task: str = "classification"
    metric: str = "accuracy"
    mode: str = "max"
    defaults: Dict[str, Any] = field(default_factory=dict)
    param_space: Dict[str, Any] = field(default_factory=dict)
    epochs_key: str = "epochs"
    gate: Dict[str, str] = field(default_factory=dict)
    tune_space: Callable[[Dict[str, Any]], Dict[str, Any]] = \
        lambda space: {"train_loop_config": space}
    config_of: Callable[[Any], Dict[str, Any]] = \
        lambda result: dict((result.config or {}).get("train_loop_config") or {})
    predictor_kwargs: Callable[[Dict[str, Any]], Dict[str, Any]] = lambda config: {}
    data_schema: Optional[Dict[str, Any]] = None
    drift: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.task not in ("classification", "regression"):
            raise ValueError(f"PipelineSpec({self.name!r}).task must be 'classification' or "
                             f"'regression', got {self.task!r}.")
        if self.mode not in ("min", "max"):
            raise ValueError(f"PipelineSpec({self.name!r}).mode must be 'min' or 'max'.")


_REGISTRY: Dict[str, Union[str, PipelineSpec]] = {
    "digits": "pipelines.digits:SPEC",
    "breast_cancer": "pipelines.breast_cancer:SPEC",
}


def register_pipeline(spec: PipelineSpec, replace: bool = False) -> None:
    """Make ``spec`` available to ``get_pipeline(spec.name)`` (and to every task)."""
    if spec.name in _REGISTRY and not replace:
        raise ValueError(f"A pipeline named {spec.name!r} is registered already: pass "
                         "replace=True to replace it.")
    _REGISTRY[spec.name] = spec


def list_pipelines() -> List[str]:
    return sorted(_REGISTRY)


def get_pipeline(name: Union[str, PipelineSpec]) -> PipelineSpec:
    """The registered pipeline called ``name`` (a spec is returned as it is).

    Raises:
        UnknownPipelineError: no such pipeline (the message lists the known ones).
    """
    if isinstance(name, PipelineSpec):
        return name
    entry: Optional[Union[str, PipelineSpec]] = _REGISTRY.get(name)
    if entry is None:
        raise UnknownPipelineError(
            f"Unknown pipeline {name!r}: use one of {list_pipelines()}, or register yours "
            "with pipelines.register_pipeline(PipelineSpec(...)).")
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        _REGISTRY[name] = entry
    return entry


__all__ = ["PipelineSpec", "get_pipeline", "list_pipelines", "register_pipeline",
           "UnknownPipelineError"]
