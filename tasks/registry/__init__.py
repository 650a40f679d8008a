"""The model registry: aliases, their gates and their history.

An abstract :class:`Registry` (``base``), two implementations (``files``: pointer files,
the default; ``mlflow``: an MLflow model registry), a factory that opens the one a
``registry=`` argument names, the promotion gate (``gates``) and the questions about
aliases (``aliases``). The implementations import only ``base``; nothing here imports a
step or a source.
"""

from tasks.registry.aliases import (alias_history, production_trained_on,
                                    promoted_checkpoint, resolve_alias)
from tasks.registry.base import (MLFLOW_PREFIX, AliasMovedError, Registry, RegistryError,
                                 check_alias)
from tasks.registry.factory import open_registry
from tasks.registry.files import FileRegistry
from tasks.registry.gates import (CHAMPION, ChampionBound, check_gate, decide,
                                  has_champion_condition, parse_gate, scalar_metrics)

__all__ = ["Registry", "RegistryError", "AliasMovedError", "FileRegistry", "MLFLOW_PREFIX",
           "CHAMPION", "ChampionBound", "open_registry", "check_alias", "parse_gate", "check_gate",
           "has_champion_condition", "decide", "scalar_metrics", "resolve_alias",
           "promoted_checkpoint", "alias_history", "production_trained_on"]
