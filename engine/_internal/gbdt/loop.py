"""What the built-in (seed-style) XGBoost and LightGBM loops share: where a resumed
run starts, what happens when its model already has every round, and the callbacks
that report each round."""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, NamedTuple, Optional

logger = logging.getLogger("engine")


def rounds_left(num_boost_round: int, done: int) -> int:
    """Rounds still to train after resuming a model that has ``done`` rounds."""
    return max(0, num_boost_round - done)


class Start(NamedTuple):
    """Where a built-in loop's ``train()`` call starts."""

    init_model: Any          # the booster to continue, None for a fresh run
    rounds: int              # rounds still to train (> 0)
    callback: Any            # the framework's ReportCallback
    callbacks: List[Any]     # it first, then the user's


def start_boosting(callback_cls: Any, rounds_done: Callable[[Any], int],
                   config: Dict[str, Any], extra: Dict[str, Any],
                   train_kwargs: Dict[str, Any]) -> Optional[Start]:
    """Resume from the session's checkpoint, if any, and build the callbacks.

    Args:
        callback_cls: The framework's ``ReportCallback`` (its ``checkpoint_cls`` loads
            the checkpoint).
        rounds_done: The rounds a booster has (the framework's own call).
        config: The seed loop's config (``num_boost_round``, ``checkpoint_frequency``,
            ``checkpoint_at_end``).
        extra: Metrics added to every report.
        train_kwargs: The user's ``train()`` arguments; their ``callbacks`` are taken
            out and run after the report callback.

    Returns:
        The start, or None when the resumed model already has ``num_boost_round``
        rounds: it was then reported once more (rank 0 with it as the checkpoint), so
        the run still ends with its model, and there is nothing left to train.
    """
    from engine.session import get_checkpoint, get_context, report

    checkpoint_cls = callback_cls.checkpoint_cls
    checkpoint = get_checkpoint()
    init_model = checkpoint_cls.load_booster(checkpoint) if checkpoint is not None else None
    done = rounds_done(init_model) if init_model is not None else 0
    todo = rounds_left(config["num_boost_round"], done)
    if todo == 0:
        logger.warning("The model to resume from has %d rounds, num_boost_round=%d: "
                       "nothing left to train.", done, config["num_boost_round"])
        rank0 = get_context().get_world_rank() == 0
        report(dict(extra, num_boosted_rounds=done),
               checkpoint=checkpoint_cls.from_model(init_model) if rank0 else None)
        return None
    callback = callback_cls(frequency=config["checkpoint_frequency"],
                            checkpoint_at_end=config["checkpoint_at_end"],
                            extra_metrics=extra)
    return Start(init_model, todo, callback,
                 [callback, *(train_kwargs.pop("callbacks", None) or [])])
