"""TensorflowConfig and the backend that gives every worker its ``TF_CONFIG``."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Optional, Sequence, Tuple

from engine._internal.worker_group.backend import Backend, BackendConfig, distinct_free_ports
from engine.exceptions import ConfigError

if TYPE_CHECKING:
    from engine._internal.worker_group.group import WorkerGroup

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
    chosen when the group starts; a group reused for another fit keeps them), so
    ``tf.distribute.MultiWorkerMirroredStrategy()`` created inside ``train_func``
    connects them.

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

    REUSABLE_WORKERS: ClassVar[bool] = True  # worker_group.reset undoes its set-up

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


# --- reuse: a worker keeps its collective server across fits ------------------------------
# TensorFlow 2.21 starts MultiWorkerMirroredStrategy's gRPC server once per process and
# cannot stop it; a second strategy re-enables collective ops on it, which tears down
# its collective state under the peers' feet (measured: with a new TF_CONFIG both ranks
# hang; with the same one a rank fails "Delete called on non-empty BufRendezvous").
# So on a worker that serves already, the group keeps its addresses (the TF_CONFIG is
# the same), the next strategy is told the server runs, and it draws collective keys
# from a range no earlier fit used (its keys start at the same number in every strategy;
# reused, they fail "Collective instance 100 expected type 1 ... but got type 0").
_STRATEGY_MODULE = "tensorflow.python.distribute.collective_all_reduce_strategy"
#: The TensorFlow minor version those private fields were checked against; a worker of
#: another version that started a collective server is stopped instead of reused.
REUSE_CHECKED_TF = "2.21"
#: Collective keys of successive fits on one worker lie this far apart (a strategy uses
#: a few group keys from its base; instance keys count per group key).
COLLECTIVE_KEY_STEP = 10_000
_given_cluster: Optional[List[str]] = None  # the workers of the TF_CONFIG set last
# TensorFlow fits set up in this process: the same on every worker of a group, which
# started together and ran the same fits, so the key bases derived from it agree.
_fits = 0


def _collective_server_def() -> Any:
    """This process's collective server's ServerDef, or None when none was started
    (``EagerContext._collective_ops_server_def``, a private field of TF 2.21)."""
    context = sys.modules.get("tensorflow.python.eager.context")
    if context is None:
        return None
    return getattr(context.context(), "_collective_ops_server_def", None)


def _server_cluster(server_def: Any) -> List[str]:
    for job in server_def.cluster.job:
        if job.name == server_def.job_name:
            return [job.tasks[i] for i in sorted(job.tasks)]
    return []


def _listen_address() -> Tuple[str, int]:
    """Runs on each worker: where it serves (its running collective server's address),
    else its node's address and a port free now."""
    server_def = _collective_server_def()
    if server_def is None:
        from engine._internal.worker_group.worker import _node_ip, draw_free_port

        return _node_ip(), draw_free_port()
    host, port = _server_cluster(server_def)[server_def.task_index].rsplit(":", 1)
    return host.strip("[]"), int(port)


def _set_tf_config(tf_config: Dict[str, Any]) -> None:
    """Runs on each worker, before ``train_func``: the strategy reads it when created.
    On a worker whose collective server runs, the next strategy is set to use it."""
    global _given_cluster, _fits
    os.environ[TF_CONFIG_ENV_VAR] = json.dumps(tf_config)
    _given_cluster = list(tf_config["cluster"]["worker"])
    _fits += 1
    server_def = _collective_server_def()
    if server_def is None:
        return
    if _server_cluster(server_def) != _given_cluster:
        raise RuntimeError(
            f"This worker's TensorFlow collective server serves {_server_cluster(server_def)}"
            f", not this run's workers {_given_cluster}, and cannot be set up again in this "
            "process. Run the fit outside engine.reuse_workers() (or reuse_actors=False).")
    module = sys.modules[_STRATEGY_MODULE]
    module.CollectiveAllReduceExtended._std_server_started = True
    context = sys.modules["tensorflow.python.eager.context"].context()
    # What the first strategy decided: with the coordination service, no health checks.
    module.CollectiveAllReduceExtended._enable_check_health = (
        context.coordination_service is None)
    for cls in (module.CollectiveAllReduceStrategy, module.CollectiveAllReduceStrategyV1):
        cls._collective_key_base = _fits * COLLECTIVE_KEY_STEP


def reuse_problem() -> Optional[str]:
    """Runs on a worker before it serves another fit (``engine._internal.worker_group.reset``):
    why it cannot, or None. It can unless a collective server runs for other workers
    than the engine's TF_CONFIG named (a strategy given its own cluster resolver), or
    under a TensorFlow version the reuse was not checked against."""
    server_def = _collective_server_def()
    if server_def is None:
        return None
    version = getattr(sys.modules.get("tensorflow"), "__version__", "")
    if not version.startswith(REUSE_CHECKED_TF + "."):
        return (f"it runs TensorFlow {version}'s collective server, whose reuse was "
                f"written for TensorFlow {REUSE_CHECKED_TF} (private fields, see above)")
    if _server_cluster(server_def) != _given_cluster:
        return ("its TensorFlow collective server serves another cluster than the "
                "engine's TF_CONFIG named, and cannot be stopped in-process")
    return None


class TensorflowBackend(Backend):
    def on_start(self, worker_group: "WorkerGroup", backend_config: TensorflowConfig) -> None:
        import ray

        # One port per worker, drawn on the worker's own node; a worker whose collective
        # server runs (a reused one) keeps its port, so its TF_CONFIG is the same.
        found = distinct_free_ports(worker_group, "TensorFlow", draw=_listen_address)
        addresses = [format_address(ip, port) for ip, port in found]
        ray.get([actor.execute.remote(_set_tf_config, build_tf_config(addresses, rank))
                 for rank, actor in enumerate(worker_group.actors)])

    # No on_shutdown: TensorFlow cannot stop its collective gRPC server in-process. A
    # worker kept for another fit keeps it (see above); the others are stopped.
