"""Pipeline steps that take and return small JSON-serialisable references, and thin
adapters for orchestrators.

    from tasks import ingest, validate, split, train, tune, evaluate, batch_predict, promote

One package per concern: ``steps`` (the steps above), ``sources`` (files, partitions,
windows, SQL), ``validation`` (schema, drift), ``registry`` (aliases: file pointers,
MLflow), ``ray_jobs`` (a step as a Ray job), and one package per orchestrator,
``prefect`` and ``airflow``, with the same step names. ``refs`` holds the references,
``layout`` the storage layout, ``notify`` the webhook client, ``report`` and ``runs`` the
run report and reading runs back, ``cli`` the ``trainyard`` command.

Importing this package imports no orchestrator and no training framework (Airflow parses
DAG files that import it): the steps are looked up on first use.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Dict

from tasks import _graveyard
from tasks.refs import CheckpointRef, DatasetRef, Promotion, TuneRef

#: Public name -> the module that defines it (imported on first access).
_LAZY: Dict[str, str] = {
    "ingest": "tasks.steps.data", "split": "tasks.steps.data",
    "train": "tasks.steps.training", "tune": "tasks.steps.training",
    "evaluate": "tasks.steps.prediction", "batch_predict": "tasks.steps.prediction",
    "promote": "tasks.steps.promotion",
    "run_name_for": "tasks.steps.names", "TaskError": "tasks.steps.names",
    "validate": "tasks.validation.schema",
    "ValidationReport": "tasks.validation.schema",
    "DataValidationError": "tasks.validation.schema",
    "resolve_alias": "tasks.registry.aliases",
    "promoted_checkpoint": "tasks.registry.aliases",
    "alias_history": "tasks.registry.aliases",
    "production_trained_on": "tasks.registry.aliases",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tasks' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """``tasks`` itself: a step name stays the step when a module of the same old name
    is imported (``import tasks.validate`` would otherwise rebind ``tasks.validate``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
_graveyard.install()

__all__ = ["DatasetRef", "CheckpointRef", "TuneRef", "Promotion", *_LAZY]
