"""TensorflowConfig and the backend that gives every worker its ``TF_CONFIG``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

from engine._internal.backend import Backend, BackendConfig, distinct_free_ports
from engine.exceptions import ConfigError

if TYPE_CHECKING:
    from engine._internal.worker_group import WorkerGroup

#: Set in the workers' environment before TensorFlow is imported there, so that
#: ``tf.keras`` is Keras 2 (the ``tf-keras`` package): TensorFlow 2.21's Keras 3 does not
#: train under ``MultiWorkerMirroredStrategy``.
LEGACY_KERAS_ENV_VAR = "TF_USE_LEGACY_KERAS"
#: TensorFlow's C++ log level in the workers (2: warnings and errors only), unless the
#: driver's environment sets it.
TF_LOG_LEVEL_ENV_VAR = "TF_CPP_MIN_LOG_LEVEL"
DEFAULT_TF_LOG_LEVEL = "2"
TF_CONFIG_ENV_VAR = "TF_CONFIG"

INSTALL_HINT = "pip install 'trainyard[tensorflow]'"


@dataclass
class TensorflowConfig(BackendConfig):
    """How the TensorFlow workers are set up.

    Every worker gets ``TF_CONFIG`` naming all workers of the group (one free port each,
    chosen per run), so ``tf.distribute.MultiWorkerMirroredStrategy()`` created inside
    ``train_func`` connects them.

    Args:
        legacy_keras: Make ``tf.keras`` Keras 2 (``tf-keras``) in the workers by setting
            ``TF_USE_LEGACY_KERAS=1`` before TensorFlow is imported there. Keras 3 fails
            under ``MultiWorkerMirroredStrategy`` in TensorFlow 2.21; set False only for
            Keras 3 code that does not use it (e.g. ``MirroredStrategy`` in one worker).
        timeout_s: TensorFlow's collectives wait forever for a rank that never joins; when
            no rank has reported for this long the group is declared hung, the error says
            where each rank was, and the attempt fails (retried under ``FailureConfig``).
            Set it above your longest interval between reports; None disables it.
    """

    legacy_keras: bool = True
    timeout_s: Optional[float] = 1800.0

    def __post_init__(self) -> None:
        if not isinstance(self.legacy_keras, bool):
            raise ConfigError(
                f"TensorflowConfig(legacy_keras={self.legacy_keras!r}) must be True or False."
            )
        if self.timeout_s is not None and (
                not isinstance(self.timeout_s, (int, float)) or isinstance(self.timeout_s, bool)
                or self.timeout_s <= 0):
            raise ConfigError(
                f"TensorflowConfig(timeout_s={self.timeout_s!r}) must be a number of seconds "
                "> 0, or None to wait forever.")

    @property
    def stall_timeout_s(self) -> Optional[float]:
        return self.timeout_s

    @property
    def backend_cls(self) -> type:
        return TensorflowBackend

    def worker_env(self) -> Dict[str, str]:
        """Environment variables the worker processes start with."""
        env = {TF_LOG_LEVEL_ENV_VAR: os.environ.get(TF_LOG_LEVEL_ENV_VAR, DEFAULT_TF_LOG_LEVEL)}
        if self.legacy_keras:
            env[LEGACY_KERAS_ENV_VAR] = "1"
        return env


def build_tf_config(addresses: Sequence[str], index: int) -> Dict[str, Any]:
    """The ``TF_CONFIG`` of worker ``index`` in a group listening on ``addresses``."""
    if not 0 <= index < len(addresses):
        raise ValueError(f"worker index {index} is outside the group of {len(addresses)}")
    return {"cluster": {"worker": list(addresses)},
            "task": {"type": "worker", "index": index}}


def format_address(ip: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets as gRPC wants it."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _set_tf_config(tf_config: Dict[str, Any]) -> None:
    """Runs on each worker, before ``train_func``: the strategy reads it when created."""
    os.environ[TF_CONFIG_ENV_VAR] = json.dumps(tf_config)


class TensorflowBackend(Backend):
    def on_start(self, worker_group: "WorkerGroup", backend_config: TensorflowConfig) -> None:
        import ray

        # One port per worker, drawn on the worker's own node.
        found = distinct_free_ports(worker_group, "TensorFlow")
        addresses = [format_address(ip, port) for ip, port in found]
        ray.get([actor.execute.remote(_set_tf_config, build_tf_config(addresses, rank))
                 for rank, actor in enumerate(worker_group.actors)])

    # No on_shutdown: TensorFlow cannot stop its collective gRPC server in-process; the
    # worker processes are stopped after every run (and never reused by a Tuner).
