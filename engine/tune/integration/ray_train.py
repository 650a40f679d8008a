"""``ray.tune.integration.ray_train``: Train inside Tune, Ray's current way.

    def train_driver(config):                     # a function trainable
        trainer = TorchTrainer(train_loop_per_worker, train_loop_config=config,
                               scaling_config=ScalingConfig(num_workers=2),
                               run_config=RunConfig(callbacks=[TuneReportCallback()]))
        trainer.fit()

    Tuner(train_driver, param_space={"lr": tune.loguniform(1e-4, 1e-1)}).fit()

Each result of the trainer (its rank 0's metrics) is reported to the Tune trial the
function runs in, with ``checkpoint_path`` (the trainer's checkpoint's path) in the
rounds that committed one; the checkpoint itself stays in the trainer's run.
"""

from __future__ import annotations

from typing import Any, Dict, List

from engine.callbacks import Callback

CHECKPOINT_PATH_KEY = "checkpoint_path"


class TuneReportCallback(Callback):
    """Report a trainer's results to the Tune trial that runs it (see the module)."""

    def __init__(self) -> None:
        self._reported_checkpoint: Any = None

    def on_trial_result(self, iteration: int, trials: List[Any], trial: Any,
                        result: Dict[str, Any], **info: Any) -> None:
        from engine.tune import report

        metrics = dict(result)
        checkpoint = getattr(trial, "checkpoint", None)
        if checkpoint is not None and checkpoint is not self._reported_checkpoint:
            metrics[CHECKPOINT_PATH_KEY] = checkpoint.path
            self._reported_checkpoint = checkpoint
        report(metrics)


__all__ = ["TuneReportCallback", "CHECKPOINT_PATH_KEY"]
