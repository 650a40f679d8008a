"""RLTrainer: an RLlib algorithm's training iterations as an engine run."""

from __future__ import annotations

import copy
import sys
from typing import Any, Dict, Optional

from engine._internal.execution.controller import RunSpec
from engine._internal.worker_group.backend import BackendConfig
from engine.checkpoint import Checkpoint
from engine.config import RunConfig, ScalingConfig
from engine.exceptions import ConfigError
from engine.result import Result
from engine.rllib._loop import RLLoop, check_stop
from engine.trainer import BaseTrainer


class RLBackendConfig(BackendConfig):
    """No framework setup: RLlib starts its own actors. A type of its own, so that a
    Tuner never hands an RL worker process (RLlib state, children) to another trial."""


class RLTrainer(BaseTrainer):
    """Runs an RLlib algorithm's ``train()`` iterations until a stop criterion holds.

    The algorithm lives in one engine worker; the actors RLlib starts from it (env
    runners, remote learners) are placed in that worker's placement group. Each
    iteration's results are reported (nested, e.g. ``env_runners/episode_return_mean``,
    plus ``episode_return_mean`` at the top level), the algorithm is checkpointed with
    ``save_to_path`` and a retry or a resumed run continues from the latest checkpoint.

    Args:
        algorithm: An RLlib algorithm name (``"PPO"``, ``"DQN"`` …) or an ``Algorithm``
            subclass. May be left out when ``config`` is an ``AlgorithmConfig``.
        config: ``AlgorithmConfig`` settings as a dict (``{"env": "CartPole-v1",
            "lr": 1e-3}``, RLlib's ``update_from_dict`` keys) or an ``AlgorithmConfig``.
            A Tuner's ``param_space={"config": {...}}`` is merged into it.
        stop: When to end, any criterion met (value ≥ threshold) ends the run:
            ``{"training_iteration": 20}`` (the algorithm's iteration count, restored
            ones included) or any result metric, nested ones as ``"a/b"``
            (``{"env_runners/episode_return_mean": 150}``).
        scaling_config: ``num_workers`` env runners, each with ``resources_per_worker``
            (default 1 CPU); ``trainer_resources`` (default 1 CPU) for the algorithm's
            own process (sampling driver, local learner); ``use_gpu`` gives the learner
            a GPU. ``None`` keeps the algorithm config's own resource settings.
        run_config: Name, storage, checkpoint retention, retries, callbacks.
        checkpoint_frequency: Checkpoint every N iterations (0: only at the end).
        checkpoint_at_end: Checkpoint the last iteration.
        resume_from_checkpoint: An RLTrainer checkpoint to start from when the run has
            none of its own yet.
        metadata: Free-form JSON-able dict written into the model card.

    Raises:
        ConfigError: bad arguments (at construction) or a config RLlib rejects (at
            ``fit()``).
    """

    _framework = "rllib"

    def __init__(self, algorithm: Any = None, *, config: Any = None,
                 stop: Optional[Dict[str, float]] = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 checkpoint_frequency: int = 1, checkpoint_at_end: bool = True,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None) -> None:
        self._base_config = None
        if _is_algorithm_config(config):
            self._base_config, config = config, {}
        elif config is not None and not isinstance(config, dict):
            raise ConfigError(f"RLTrainer(config=...) must be a dict of AlgorithmConfig "
                              f"settings or an AlgorithmConfig, got {type(config).__name__}.")
        if algorithm is None and self._base_config is None:
            raise ConfigError("RLTrainer needs an algorithm: pass algorithm='PPO' (or an "
                              "Algorithm subclass), or config=PPOConfig()...")
        if algorithm is not None and not isinstance(algorithm, (str, type)):
            raise ConfigError(f"RLTrainer(algorithm={algorithm!r}) is invalid: pass an "
                              "RLlib algorithm name like 'PPO' or an Algorithm subclass.")
        if scaling_config is not None and not isinstance(scaling_config, ScalingConfig):
            raise ConfigError("RLTrainer(scaling_config=...) must be an engine.ScalingConfig.")
        if isinstance(checkpoint_frequency, bool) or not isinstance(checkpoint_frequency, int) \
                or checkpoint_frequency < 0:
            raise ConfigError(f"RLTrainer(checkpoint_frequency={checkpoint_frequency!r}) "
                              "must be an integer >= 0 (0: checkpoint only at the end).")
        if resume_from_checkpoint is not None and not isinstance(resume_from_checkpoint,
                                                                 Checkpoint):
            raise ConfigError("resume_from_checkpoint must be an engine.Checkpoint "
                              "(e.g. result.checkpoint).")
        self.algorithm = algorithm
        self.config: Dict[str, Any] = dict(config or {})
        self.stop = check_stop(stop)
        self.scaling_config = scaling_config
        self.run_config = run_config or RunConfig()
        self.checkpoint_frequency = checkpoint_frequency
        self.checkpoint_at_end = bool(checkpoint_at_end)
        self.resume_from_checkpoint = resume_from_checkpoint
        self.metadata = metadata or {}
        self.backend_config = RLBackendConfig()

    # A Tuner reads and sets the training function's config under this name (PBT).
    @property
    def train_loop_config(self) -> Dict[str, Any]:
        return self.config

    @train_loop_config.setter
    def train_loop_config(self, value: Dict[str, Any]) -> None:
        self.config = dict(value or {})

    def _run_spec(self) -> RunSpec:
        import cloudpickle

        from engine.rllib import _config

        if not isinstance(self.config, dict):
            raise ConfigError("RLTrainer.config must be a dict (param_space={'config': "
                              "{...}} merges into it).")
        stop = check_stop(self.stop)
        with _config.tensorflow_left_as_is():  # the driver only plans the run
            cls, algo_config = _config.build_config(self.algorithm, self._base_config,
                                                    self.config, self.scaling_config)
        bundles, strategy = _config.resource_bundles(cls, algo_config)
        payload = cloudpickle.dumps((self.algorithm, self._base_config, self.scaling_config))
        # CheckpointConfig(checkpoint_frequency, checkpoint_at_end) as in Ray, where given.
        frequency, at_end = self.run_config.checkpoint_config.builtin_loop_checkpointing(
            type(self).__name__, self.checkpoint_frequency, self.checkpoint_at_end)
        loop = RLLoop(payload, framework=str(algo_config.framework_str), stop=stop,
                      checkpoint_frequency=frequency, checkpoint_at_end=at_end)
        spec = RunSpec(
            train_func=loop, train_loop_config=copy.copy(self.config),
            scaling_config=_config.plan_scaling(bundles, strategy),
            run_config=self.run_config, backend_config=self.backend_config,
            trainer_name=type(self).__name__,
            resume_from_checkpoint=self.resume_from_checkpoint,
        )
        spec.model_card = self._model_card(cls, algo_config)
        return spec

    def _model_card(self, cls: type, algo_config: Any) -> Dict[str, Any]:
        env = algo_config.env
        return {
            "framework": self._framework, "trainer": type(self).__name__,
            "algorithm": cls.__name__, "env": env if isinstance(env, str) else repr(env),
            "feature_columns": None, "label_column": None,
            "data_fingerprint": self.metadata.get("data_fingerprint"),
            "metadata": self.metadata,
        }

    def fit(self) -> Result:
        """Train until a stop criterion holds and return the :class:`Result`; its
        checkpoint loads with :func:`engine.rllib.load_algorithm`.

        Raises:
            TrainingFailedError: the algorithm failed and retries are exhausted.
        """
        return self._run_and_keep(self._run_spec())


def _is_algorithm_config(obj: Any) -> bool:
    if obj is None or isinstance(obj, dict) or "ray.rllib" not in sys.modules:
        return False  # an AlgorithmConfig can only exist once RLlib was imported
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    return isinstance(obj, AlgorithmConfig)
