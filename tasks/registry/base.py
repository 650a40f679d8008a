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


class AliasMovedError(RegistryError):
    """The alias moved to another checkpoint between the gate's reading of it and the
    promotion (another promoter got there first): this decision was made against a
    champion that no longer holds the alias, so it did not move it. ``promote`` then
    decides again against the new champion; it raises this only if the alias keeps
    moving."""

    def __init__(self, pipeline: str, alias: str, expected: Optional[str],
                 now: Optional[str]) -> None:
        self.expected, self.now = expected, now
        super().__init__(
            f"{pipeline}@{alias} moved from {expected or 'nothing'} to {now or 'nothing'} "
            "while this promotion was being decided, so it was not moved: another "
            "promoter changed it meanwhile. Promote again; the gate then compares "
            "against the new champion.")


def check_unmoved(record: Dict[str, Any], now: Optional[str]) -> None:
    """Raise :class:`AliasMovedError` unless the alias still points where the gate saw
    it (``record["previous"]``), or already at this candidate (a retry)."""
    expected = (record.get("previous") or {}).get("uri")
    if now not in (expected, record["checkpoint"]["uri"]):
        raise AliasMovedError(record["pipeline"], record["alias"], expected, now)


class Registry(abc.ABC):
    """Where aliases live: which checkpoint an alias points at, and every decision on it."""

    @abc.abstractmethod
    def current(self, pipeline: str, alias: str) -> Optional[CheckpointRef]:
        """The checkpoint ``alias`` points at for ``pipeline``, or None."""

    @abc.abstractmethod
    def record(self, record: Dict[str, Any], context: Dict[str, Any]) -> Tuple[str, str]:
        """Keep one decision, then (promoted) move the alias, only if it still points at
        ``record["previous"]`` (else :class:`AliasMovedError`, the alias untouched);
        returns ``(pointer URI, entry URI)``, redacted."""

    @abc.abstractmethod
    def history(self, pipeline: str, alias: str) -> List[Dict[str, Any]]:
        """Every decision for ``alias``, oldest first."""


def check_alias(alias: str) -> str:
    if not isinstance(alias, str) or not _ALIAS_RE.match(alias):
        raise ConfigError(f"alias {alias!r} is invalid: use lower-case letters, digits, "
                          "'_' and '-' (e.g. 'production', 'staging').")
    return alias
