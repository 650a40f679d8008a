"""What runs in the RLTrainer's worker: build the algorithm, resume it, call ``train()``
until a stop criterion holds, report each iteration, checkpoint the algorithm."""

from __future__ import annotations

import logging
import math
import os
import sys
import tempfile
from typing import Any, Dict, Mapping, Optional

from engine import constants
from engine.exceptions import ConfigError

logger = logging.getLogger("engine")

# RLlib result keys the engine fills in itself on every report (or that are not
# metrics: the full algorithm config).
_ENGINE_FIELDS = frozenset(constants.AUTOMATIC_FIELDS) | {"config"}
# The criterion counted by the algorithm itself; it continues across resumes.
ITERATION_KEY = "training_iteration"
# Top-level copy of the headline metric, for lookups that do not reach into nested
# dicts (Tuner metric names, schedulers).
RETURN_MEAN_KEY = "episode_return_mean"
_RETURN_MEAN_PATH = ("env_runners", "episode_return_mean")
_DROP = object()


def check_stop(stop: Any) -> Dict[str, float]:
    """Validate ``RLTrainer(stop=...)``: a non-empty dict of metric → threshold."""
    example = ("e.g. stop={'env_runners/episode_return_mean': 150, "
               "'training_iteration': 50}")
    if not isinstance(stop, Mapping) or not stop:
        raise ConfigError(f"RLTrainer needs stop=..., a dict of metric name → threshold "
                          f"(the run ends when any is reached), {example}.")
    out = {}
    for key, value in stop.items():
        if not isinstance(key, str) or not key.strip("/"):
            raise ConfigError(f"RLTrainer(stop=...) key {key!r} must be a metric name, "
                              f"{example}.")
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or math.isnan(value):
            raise ConfigError(f"RLTrainer(stop={{{key!r}: {value!r}}}): the threshold must "
                              f"be a number, {example}.")
        out[key] = value
    return out


def lookup(result: Mapping[str, Any], key: str) -> Any:
    """``result[key]``, where ``a/b/c`` reaches into nested dicts; None when absent."""
    if key in result:
        return result[key]
    node: Any = result
    for part in key.strip("/").split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def stop_reached(stop: Dict[str, float], result: Mapping[str, Any]) -> Optional[str]:
    """The first criterion ``result`` meets (value ≥ threshold), else None."""
    for key, threshold in stop.items():
        value = _plain(lookup(result, key))
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and value >= threshold:
            return key
    return None


def check_stop_keys(stop: Dict[str, float], result: Mapping[str, Any]) -> None:
    """Fail fast on a stop key that can never be met: its top-level name is not in the
    algorithm's results (a nested value may appear later, e.g. once episodes end)."""
    for key in stop:
        head = key.strip("/").split("/")[0]
        if key not in result and head not in result and key != RETURN_MEAN_KEY:
            shown = ", ".join(sorted(k for k in result if k != "config"))
            raise ConfigError(
                f"RLTrainer(stop={{{key!r}: ...}}): {head!r} is not in the algorithm's "
                f"results, so the run would never stop. Result keys: {shown} (nested "
                "values as 'env_runners/episode_return_mean')."
            )


def to_metrics(result: Mapping[str, Any]) -> Dict[str, Any]:
    """An RLlib result as ``report()`` metrics: plain Python values only, without the
    fields the engine fills in, plus ``episode_return_mean`` at the top level."""
    metrics = {str(k): _plain(v) for k, v in result.items() if k not in _ENGINE_FIELDS}
    metrics = {k: v for k, v in metrics.items() if v is not _DROP}
    ret = lookup(metrics, "/".join(_RETURN_MEAN_PATH))
    if ret is not None:
        metrics[RETURN_MEAN_KEY] = ret
    return metrics


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return float(value)  # numpy.float64 is a float subclass
    if isinstance(value, Mapping):
        out = {str(k): _plain(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not _DROP}
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return [v for v in items if v is not _DROP]
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return _plain(value.item())  # numpy / torch scalars
    if hasattr(value, "tolist") and hasattr(value, "shape"):
        return _plain(value.tolist())
    return _DROP  # not a metric (an object RLlib put in its results)


def skip_tf_import(framework: str) -> None:
    """Keep RLlib from importing TensorFlow in this process when the algorithm runs on
    torch: RLlib imports TensorFlow whenever it is installed, seconds of every start.
    RLlib's ``RLLIB_TEST_NO_TF_IMPORT`` switch, set in this process only (RLlib's own
    env-runner processes are left as they are); a train_func that imports TensorFlow
    itself still gets it."""
    if framework != "torch" or "tensorflow" in sys.modules or "ray.rllib" in sys.modules:
        return
    os.environ["RLLIB_TEST_NO_TF_IMPORT"] = "1"  # this worker process only
    logging.getLogger("ray.rllib.utils.framework").addFilter(
        _DropNotice("for test purposes"))


def quiet_tune_notices() -> None:
    """Drop Ray Tune's advice to set ``reuse_actors``, which the Algorithm (a Tune
    Trainable) logs on a slow start but which means nothing outside Ray Tune."""
    logging.getLogger("ray.tune.trainable.trainable").addFilter(_DropNotice("reuse_actors"))


class _DropNotice(logging.Filter):
    def __init__(self, fragment: str) -> None:
        super().__init__()
        self.fragment = fragment

    def filter(self, record: logging.LogRecord) -> bool:
        return self.fragment not in record.getMessage()


class RLLoop:
    """The train function of an RLTrainer run (``f(config)``, ``config`` being the
    algorithm-config overrides, which a Tuner may change between restarts).

    The algorithm and a base AlgorithmConfig travel pickled, so that RLlib is imported
    only after ``skip_tf_import`` ran.
    """

    def __init__(self, payload: bytes, framework: str, stop: Dict[str, float],
                 checkpoint_frequency: int, checkpoint_at_end: bool) -> None:
        self.payload = payload
        self.framework = framework
        self.stop = stop
        self.checkpoint_frequency = checkpoint_frequency
        self.checkpoint_at_end = checkpoint_at_end

    def __call__(self, config: Optional[Dict[str, Any]] = None) -> None:
        import cloudpickle

        skip_tf_import(self.framework)
        quiet_tune_notices()
        from engine.rllib._config import build_config

        algorithm, base, scaling = cloudpickle.loads(self.payload)
        _, algo_config = build_config(algorithm, base, config, scaling)
        algo = algo_config.build_algo()
        try:
            self._train(algo)
        finally:
            algo.stop()

    def _train(self, algo: Any) -> None:
        from engine import session
        from engine.checkpoint import Checkpoint

        start = session.get_checkpoint()
        if start is not None:
            with start.as_directory() as path:
                algo.restore_from_path(path)
            logger.info("Restored the algorithm at iteration %d.", algo.iteration)
            limit = self.stop.get(ITERATION_KEY)
            if limit is not None and algo.iteration >= limit:  # e.g. a retry after the end
                logger.info("The checkpoint is at iteration %d: nothing left to train.",
                            algo.iteration)
                return
        first = True
        while True:
            result = algo.train()
            metrics = to_metrics(result)
            # What stop criteria see: the reported metrics, RLlib's own counters
            # (time_total_s …) and the algorithm's iteration count.
            view = {**result, **metrics, ITERATION_KEY: algo.iteration}
            if first:
                check_stop_keys(self.stop, view)
                first = False
            done = stop_reached(self.stop, view)
            if self._checkpoint_due(algo.iteration, done is not None):
                with tempfile.TemporaryDirectory(prefix="rllib_ckpt_") as path:
                    algo.save_to_path(path)
                    session.report(metrics, checkpoint=Checkpoint.from_directory(path))
            else:
                session.report(metrics)
            if done is not None:
                logger.info("Stop criterion %r reached at iteration %d.", done,
                            algo.iteration)
                return

    def _checkpoint_due(self, iteration: int, last: bool) -> bool:
        if last and self.checkpoint_at_end:
            return True
        freq = self.checkpoint_frequency
        return freq > 0 and iteration % freq == 0
