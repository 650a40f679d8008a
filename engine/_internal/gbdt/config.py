"""What the tree frameworks' backend configs share: the lazy framework import with an
install hint, the ``timeout_s`` setting, and the slot where a backend leaves each
worker its collective parameters (the framework halves fill and read it)."""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional

from engine._internal.worker_group.backend import BackendConfig
from engine.exceptions import ConfigError


def import_framework(module: str, install_hint: str) -> Any:
    """``import <module>``, raising ``ImportError(install_hint)`` when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(install_hint) from exc


@dataclass
class GBDTConfig(BackendConfig):
    """Base of ``XGBoostConfig`` and ``LightGBMConfig``: how long a worker waits on its
    peers (what the framework's timeout is called and its unit stay with the
    framework's backend). A subclass names its backend in ``_backend``.

    Raises:
        ConfigError: ``timeout_s`` is not an integer > 0.
    """

    timeout_s: int = 1800
    _backend: ClassVar[type]

    @property
    def backend_cls(self) -> type:
        return self._backend

    def __post_init__(self) -> None:
        if not isinstance(self.timeout_s, int) or isinstance(self.timeout_s, bool) \
                or self.timeout_s <= 0:
            raise ConfigError(f"{type(self).__name__}(timeout_s={self.timeout_s!r}) must "
                              "be an integer > 0 (seconds).")


# --- worker side -------------------------------------------------------------------------
# Set by the framework's backend (``actor.execute.remote(set_worker_params, ...)``) in
# each worker process before training starts; read by the training function's thread.
_worker_params: Dict[str, Dict[str, Any]] = {}
_params_lock = threading.Lock()


def set_worker_params(framework: str, params: Dict[str, Any]) -> None:
    """Hold ``params`` as this worker's collective parameters for ``framework``."""
    with _params_lock:
        _worker_params[framework] = dict(params)


def get_worker_params(framework: str) -> Optional[Dict[str, Any]]:
    """A copy of this worker's collective parameters for ``framework`` (None when its
    backend set none up)."""
    with _params_lock:
        params = _worker_params.get(framework)
        return dict(params) if params is not None else None


def clear_worker_params() -> None:
    """Forget every framework's parameters (the worker serves another fit next)."""
    with _params_lock:
        _worker_params.clear()
