"""What a model registry is: the interface every implementation has, its error, and the
rules for alias names.

Steps, sources and the implementations (:mod:`tasks.registry.files`,
:mod:`tasks.registry.mlflow`) all import this module and nothing of each other; a
registry is opened through :func:`tasks.registry.factory.open_registry`.
"""

from __future__ import annotations

import abc
import re
from typing import Any, Dict, List, Optional, Tuple

from engine.exceptions import ConfigError, TrainyardError
from tasks.refs import CheckpointRef

MLFLOW_PREFIX = "mlflow:"
_ALIAS_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


class RegistryError(TrainyardError):
    """The model registry could not be read or written: the alias did not move, and a
    retry of ``promote`` records the decision once."""


class Registry(abc.ABC):
    """Where aliases live: which checkpoint an alias points at, and every decision on it."""

    @abc.abstractmethod
    def current(self, pipeline: str, alias: str) -> Optional[CheckpointRef]:
        """The checkpoint ``alias`` points at for ``pipeline``, or None."""

    @abc.abstractmethod
    def record(self, record: Dict[str, Any], context: Dict[str, Any]) -> Tuple[str, str]:
        """Keep one decision, then (promoted) move the alias; returns ``(pointer URI,
        entry URI)``, redacted."""

    @abc.abstractmethod
    def history(self, pipeline: str, alias: str) -> List[Dict[str, Any]]:
        """Every decision for ``alias``, oldest first."""


def check_alias(alias: str) -> str:
    if not isinstance(alias, str) or not _ALIAS_RE.match(alias):
        raise ConfigError(f"alias {alias!r} is invalid: use lower-case letters, digits, "
                          "'_' and '-' (e.g. 'production', 'staging').")
    return alias
