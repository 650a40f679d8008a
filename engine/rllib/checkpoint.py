"""Loading an RLTrainer checkpoint back into an RLlib algorithm."""

from __future__ import annotations

from typing import Any, Optional, Union

from engine.checkpoint import Checkpoint
from engine.exceptions import CheckpointError, ConfigError, FrameworkMismatchError


def load_algorithm(checkpoint: Union[Checkpoint, str], config: Optional[Any] = None) -> Any:
    """Rebuild the trained RLlib ``Algorithm`` from an RLTrainer checkpoint.

    A checkpoint holds the pickled algorithm config and state (``algo.save_to_path``):
    load only checkpoints you trust. Remote checkpoints (``s3://``) are downloaded first.

    Args:
        checkpoint: ``result.checkpoint`` (or a local checkpoint directory).
        config: An ``AlgorithmConfig`` to build the algorithm from instead of the one
            stored in the checkpoint, e.g. the training config with
            ``.env_runners(num_env_runners=0)`` to act without starting env-runner
            actors. Its RLModule must match the checkpoint's.

    Returns:
        The algorithm, restored (weights, optimizer, connector state, iteration). Act
        with ``algo.get_module().forward_inference({"obs": ...})``; call ``algo.stop()``
        when done.

    Raises:
        FrameworkMismatchError: the checkpoint was written by another framework's trainer.
        CheckpointError: the directory holds no RLlib algorithm checkpoint.
    """
    if isinstance(checkpoint, str):
        checkpoint = Checkpoint.from_directory(checkpoint)
    if not isinstance(checkpoint, Checkpoint):
        raise ConfigError("load_algorithm() takes an engine.Checkpoint (result.checkpoint) "
                          f"or a directory path, got {type(checkpoint).__name__}.")
    card = checkpoint.get_model_card() or {}
    if card.get("framework") not in (None, "rllib"):
        raise FrameworkMismatchError(
            f"Checkpoint {checkpoint.uri!r} was written by a {card['framework']!r} trainer, "
            "not by RLTrainer: load it with that framework's predictor.",
            checkpoint_framework=card["framework"], predictor_framework="rllib")
    from ray.rllib.algorithms.algorithm import Algorithm

    with checkpoint.as_directory() as path:
        try:
            if config is None:
                return Algorithm.from_checkpoint(path)
            algo = config.build_algo()
        except FileNotFoundError as exc:
            raise CheckpointError(f"Checkpoint {checkpoint.uri!r} holds no RLlib algorithm "
                                  f"(written by RLTrainer?): {exc}") from exc
        try:
            algo.restore_from_path(path)
        except BaseException:
            algo.stop()
            raise
        return algo
