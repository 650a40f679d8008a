"""Opening the registry a ``registry=`` argument (or ``$TRAINYARD_REGISTRY``) names."""

from __future__ import annotations

from typing import Optional

from tasks.registry.base import MLFLOW_PREFIX, Registry


def open_registry(registry: Optional[str], storage: Optional[str]) -> Registry:
    """The registry ``registry`` names: ``mlflow:<tracking URI>`` (an MLflow model
    registry), a path or URI (pointer files there), or None: ``$TRAINYARD_REGISTRY``,
    else pointer files under ``<storage>/models``."""
    from engine import constants

    registry = registry or constants.get(constants.REGISTRY_ENV_VAR) or None
    if registry and registry.startswith(MLFLOW_PREFIX):
        from tasks.registry.mlflow import MlflowRegistry

        return MlflowRegistry(registry[len(MLFLOW_PREFIX):])
    from tasks.registry.files import FileRegistry, registry_root

    return FileRegistry(registry_root(registry, storage))
