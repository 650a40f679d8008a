"""LightGBMTrainer: data-parallel LightGBM on the engine's worker group."""

from __future__ import annotations

from typing import Any, Callable, Optional

from engine._internal.gbdt.trainer import GBDTTrainer
from engine.checkpoint import Checkpoint
from engine.exceptions import ConfigError
from engine.lightgbm._loop import TREE_LEARNER_PARAMS, lightgbm_seed_loop
from engine.lightgbm.checkpoint import MODEL_FILE, load_booster
from engine.lightgbm.config import LightGBMConfig

# Tree learners that need every row on every worker: wrong on split data.
_WHOLE_DATA_LEARNERS = ("serial", "feature", "feature_parallel")


class LightGBMTrainer(GBDTTrainer):
    """Trains a LightGBM model data-parallel: each worker builds its ``lgb.Dataset``
    from its own shard of ``datasets["train"]`` and the workers join LightGBM's socket
    network (``machines``, ``local_listen_port``, ``num_machines``,
    ``tree_learner="data"``; ports chosen per run).

    Two ways to use it::

        LightGBMTrainer(datasets={"train": ds, "validation": ds2}, label_column="target",
                        params={"objective": "binary"}, num_boost_round=50,
                        scaling_config=ScalingConfig(num_workers=2))

        # Your own loop: params.update(engine.lightgbm.get_network_params()), build the
        # Dataset from get_dataset_shard("train"), lgb.train(..., callbacks=[
        # engine.lightgbm.ReportCallback()]).
        LightGBMTrainer(train_loop_per_worker=f, datasets={...}, ...)

    Metrics are reported every round as ``<dataset>-<metric>``
    (``validation-binary_logloss``) plus ``worker_train_rows``. LightGBM computes them
    per worker, so ``train-*`` is rank 0's shard, while eval sets (given whole to every
    worker) are the whole set. Checkpoints (``model.txt``, ``model_card.json``) every
    ``checkpoint_frequency`` rounds and at the end; a checkpoint to resume from is
    boosted further up to ``num_boost_round`` rounds in all.

    Args:
        train_loop_per_worker: Your training function (function style); None for the
            built-in loop.
        train_loop_config: Its ``config``.
        lightgbm_config: Network settings (:class:`LightGBMConfig`).
        label_column: The label column of every dataset (built-in loop).
        params: ``lightgbm.train`` parameters; ``num_threads`` defaults to the worker's
            CPUs, ``tree_learner`` to ``"data"`` (``"voting"`` works too).
        num_boost_round: Rounds in all (default 10).
        checkpoint_frequency: Checkpoint every this many rounds (0: only at the end).
        checkpoint_at_end: Checkpoint the final model.
        scaling_config, run_config, datasets, resume_from_checkpoint, metadata,
        preprocessor: As for :class:`engine.trainer.DataParallelTrainer`.
        dataset_config: Default: split only ``"train"``.
        **train_kwargs: More ``lightgbm.train`` arguments for the built-in loop
            (``callbacks``, ``feval`` …).

    Raises:
        ConfigError: contradictory or missing arguments (the message says which).
    """

    _framework = "lightgbm"
    _seed_loop = staticmethod(lightgbm_seed_loop)
    _reserved_train_kwargs = ("params", "train_set", "num_boost_round", "valid_sets",
                              "valid_names", "init_model")

    def __init__(self, train_loop_per_worker: Optional[Callable] = None, *,
                 lightgbm_config: Optional[LightGBMConfig] = None, **kwargs: Any) -> None:
        super().__init__(train_loop_per_worker,
                         backend_config=lightgbm_config or LightGBMConfig(), **kwargs)

    def _check_params(self) -> None:
        if self.scaling_config.num_workers < 2:
            return
        for alias in TREE_LEARNER_PARAMS:
            learner = self.params.get(alias)
            if learner in _WHOLE_DATA_LEARNERS:
                raise ConfigError(
                    f"LightGBMTrainer(params={{{alias!r}: {learner!r}}}) needs every row on "
                    "every worker, but datasets['train'] is split across "
                    f"{self.scaling_config.num_workers} workers: use 'data' (the default) "
                    "or 'voting', or ScalingConfig(num_workers=1).")

    @staticmethod
    def get_model(checkpoint: Checkpoint, filename: str = MODEL_FILE) -> Any:
        """The ``lightgbm.Booster`` saved in a checkpoint of this trainer."""
        return load_booster(checkpoint, filename)
