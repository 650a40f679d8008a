"""Questions about aliases: which checkpoint one points at, which checkpoint it was once
promoted to, its history, and whether the model behind it was trained on given data.

Every answer comes from the registry :func:`~tasks.registry.factory.open_registry`
opens; nothing here imports a step or a source, so the steps (``promote``) and the
sources (``skip_if_unchanged`` in the flows and DAGs) can both ask.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from engine.exceptions import ConfigError
from tasks.refs import CheckpointRef, DatasetRef
from tasks.registry.base import check_alias
from tasks.registry.factory import open_registry


def resolve_alias(pipeline: str, alias: str = "production", *,
                  storage: Optional[str] = None,
                  registry: Optional[str] = None) -> Optional[CheckpointRef]:
    """The checkpoint ``alias`` points at for ``pipeline``, or None if it was never set.

    Args:
        registry: Where aliases live (as for :func:`tasks.promote`); default
            ``$TRAINYARD_REGISTRY``, else ``<storage>/models``.
    """
    check_alias(alias)
    return open_registry(registry, storage).current(pipeline, alias)


def promoted_checkpoint(pipeline: str, uri: str, alias: str = "production", *,
                        storage: Optional[str] = None,
                        registry: Optional[str] = None) -> CheckpointRef:
    """The checkpoint at ``uri`` that ``alias`` was once promoted to (e.g. the one a
    ``trainyard.model.promoted`` event names), even if the alias has moved on since.

    Raises:
        ConfigError: ``uri`` was never promoted as ``alias`` of ``pipeline`` there.
    """
    current = resolve_alias(pipeline, alias, storage=storage, registry=registry)
    if current is not None and current.uri == uri:
        return current
    for entry in reversed(alias_history(pipeline, alias, storage=storage,
                                        registry=registry)):
        ckpt = entry.get("checkpoint") or {}
        if entry.get("decision") == "promoted" and ckpt.get("uri") == uri:
            return CheckpointRef.from_dict(ckpt)
    raise ConfigError(f"{uri!r} was never promoted as {pipeline}/{alias} in this registry: "
                      "pass the storage (or registry) the retraining promoted in.")


def alias_history(pipeline: str, alias: str = "production", *,
                  storage: Optional[str] = None,
                  registry: Optional[str] = None) -> List[Dict[str, Any]]:
    """Every promotion decision for ``alias``, oldest first."""
    check_alias(alias)
    return open_registry(registry, storage).history(pipeline, alias)


def production_trained_on(pipeline: str, train: Any, alias: str = "production", *,
                          storage: Optional[str] = None) -> Optional[CheckpointRef]:
    """The model ``alias`` points at if it was trained on exactly ``train`` (the same
    training split fingerprint), else None: what ``skip_if_unchanged`` asks."""
    ref = DatasetRef.from_dict(train)
    production = resolve_alias(pipeline, alias, storage=storage)
    if production is not None and production.data_fingerprint == ref.fingerprint:
        return production
    return None


__all__ = ["resolve_alias", "promoted_checkpoint", "alias_history", "production_trained_on"]
