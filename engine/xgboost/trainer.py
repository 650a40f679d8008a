"""XGBoostTrainer: data-parallel XGBoost on the engine's worker group."""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from engine._internal.gbdt.trainer import GBDTTrainer
from engine.checkpoint import Checkpoint
from engine.xgboost._loop import xgboost_seed_loop
from engine.xgboost.checkpoint import MODEL_FILE, load_booster
from engine.xgboost.config import XGBoostConfig, run_in_collective


class XGBoostTrainer(GBDTTrainer):
    """Trains an XGBoost model data-parallel: each worker builds its ``DMatrix`` from its
    own shard of ``datasets["train"]``, and the workers build every tree together
    through XGBoost's collective (histograms are allreduced each round).

    Two ways to use it::

        # The built-in loop: every dataset but "train" is an eval set.
        XGBoostTrainer(datasets={"train": ds, "validation": ds2}, label_column="target",
                       params={"objective": "binary:logistic", "eval_metric": "logloss"},
                       num_boost_round=50, scaling_config=ScalingConfig(num_workers=2))

        # Your own loop: read get_dataset_shard("train"), call xgboost.train with
        # engine.xgboost.ReportCallback(); the collective is already set up.
        XGBoostTrainer(train_loop_per_worker=f, datasets={...},
                       scaling_config=ScalingConfig(num_workers=2))

    Metrics are reported every round as ``<dataset>-<metric>`` (``train-logloss``,
    ``validation-logloss``), computed by XGBoost over all workers' rows, plus
    ``worker_train_rows`` (the rows of this worker's matrix). The model is checkpointed
    (``model.ubj`` and ``model_card.json``) every ``checkpoint_frequency`` rounds and at
    the end. A checkpoint to resume from (``resume_from_checkpoint``, or the run's own
    after a worker failure) is boosted further up to ``num_boost_round`` rounds in all.

    Args:
        train_loop_per_worker: Your training function (function style); None for the
            built-in loop.
        train_loop_config: Its ``config``.
        xgboost_config: Collective settings (:class:`XGBoostConfig`).
        label_column: The label column of every dataset (built-in loop).
        params: ``xgboost.train`` parameters. ``nthread`` defaults to the worker's CPUs;
            with ``ScalingConfig(use_gpu=True)``, ``device`` defaults to ``"cuda"``.
        num_boost_round: Rounds in all (default 10).
        checkpoint_frequency: Checkpoint every this many rounds (0: only at the end).
        checkpoint_at_end: Checkpoint the final model.
        scaling_config: Workers and their resources (1 CPU each by default).
        run_config, datasets, resume_from_checkpoint, metadata, preprocessor: As for
            :class:`engine.trainer.DataParallelTrainer`.
        dataset_config: Default: split only ``"train"``; eval sets reach every worker
            whole.
        **train_kwargs: More ``xgboost.train`` arguments for the built-in loop
            (``callbacks``, ``early_stopping_rounds``, ``custom_metric``, ``obj`` …).

    Raises:
        ConfigError: contradictory or missing arguments (the message says which).
    """

    _framework = "xgboost"
    _seed_loop = staticmethod(xgboost_seed_loop)
    _reserved_train_kwargs = ("params", "dtrain", "num_boost_round", "evals", "xgb_model")

    def __init__(self, train_loop_per_worker: Optional[Callable] = None, *,
                 xgboost_config: Optional[XGBoostConfig] = None, **kwargs: Any) -> None:
        super().__init__(train_loop_per_worker,
                         backend_config=xgboost_config or XGBoostConfig(), **kwargs)

    def _wrap_train_func(self, train_func: Callable) -> Callable:
        return functools.partial(run_in_collective, train_func)

    @staticmethod
    def get_model(checkpoint: Checkpoint, filename: str = MODEL_FILE) -> Any:
        """The ``xgboost.Booster`` saved in a checkpoint of this trainer."""
        return load_booster(checkpoint, filename)
