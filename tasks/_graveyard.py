"""Module paths the docs showed before ``tasks`` became a package of packages (0.1), kept
working from their new homes (Lightning's ``_graveyard`` idea).

Importing an old path gives the new module itself (the same objects, not copies) and a
``DeprecationWarning`` naming the import to use. Private modules (``tasks._jobs`` …) moved
without such a shim: nothing outside trainyard should have imported them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any, Optional, Sequence

#: Old public module -> its new home.
MOVED = {
    "tasks.core": "tasks.steps",
    "tasks.validate": "tasks.validation",
    "tasks.prefect_tasks": "tasks.prefect",
    "tasks.airflow_tasks": "tasks.airflow",
    "tasks.airflow_triggers": "tasks.airflow.triggers",
}
#: Old paths whose steps ``tasks`` itself exports.
_STEPS = ("tasks.core", "tasks.validate")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths (first on ``sys.meta_path``, so that no other copy of the old
    module can be found) and loads each as its new module."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Any = None) -> Any:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> ModuleType:
        new = MOVED[spec.name]
        steps = " (the steps also: `from tasks import ...`)" if spec.name in _STEPS else ""
        warnings.warn(f"{spec.name} moved to {new} in trainyard 0.1: import from "
                      f"{new}{steps}; the old path will go.", DeprecationWarning,
                      stacklevel=2)  # the importing line: warnings skips importlib's frames
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the new module is already imported."""


_FINDER = _Finder()


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _FINDER)
