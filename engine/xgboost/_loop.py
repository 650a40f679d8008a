"""The seed-style XGBoostTrainer's loop, run on every worker inside the collective."""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from engine._internal.gbdt import TRAIN_DATASET, read_shard, rounds_left
from engine.xgboost.config import import_xgboost

logger = logging.getLogger("engine")

_THREAD_PARAMS = ("nthread", "n_jobs")


def xgboost_seed_loop(config: Dict[str, Any],
                      train_kwargs: Optional[Dict[str, Any]] = None) -> None:
    """Build this worker's DMatrix from its shard, then boost to ``num_boost_round``
    rounds in all (continuing a checkpointed model), reporting every round."""
    xgboost = import_xgboost()
    from engine.session import get_checkpoint, report
    from engine.xgboost.callback import ReportCallback
    from engine.xgboost.checkpoint import XGBoostCheckpoint, load_booster

    kwargs = dict(train_kwargs or {})
    label = config["label_column"]
    dtrain, evals = _matrices(xgboost, label, config["eval_datasets"])
    params = dict(config["params"])
    if not any(k in params for k in _THREAD_PARAMS):
        params["nthread"] = config["cpus_per_worker"]
    if config.get("use_gpu"):
        params.setdefault("device", "cuda")  # the GPU Ray gave this worker

    checkpoint = get_checkpoint()
    init_model = load_booster(checkpoint) if checkpoint is not None else None
    done = init_model.num_boosted_rounds() if init_model is not None else 0
    todo = rounds_left(config["num_boost_round"], done)
    extra = {"worker_train_rows": int(dtrain.num_row())}
    if todo == 0:
        logger.warning("The model to resume from has %d rounds, num_boost_round=%d: "
                       "nothing left to train.", done, config["num_boost_round"])
        ckpt = XGBoostCheckpoint.from_model(init_model) if _rank() == 0 else None
        report(dict(extra, num_boosted_rounds=done), checkpoint=ckpt)
        return
    callback = ReportCallback(frequency=config["checkpoint_frequency"],
                              checkpoint_at_end=config["checkpoint_at_end"],
                              extra_metrics=extra)
    callbacks = [callback, *(kwargs.pop("callbacks", None) or [])]
    kwargs.setdefault("verbose_eval", False)
    xgboost.train(params, dtrain, num_boost_round=todo, evals=evals,
                  xgb_model=init_model, callbacks=callbacks, **kwargs)


def _matrices(xgboost: Any, label: str, eval_names: List[str]
              ) -> Tuple[Any, List[Tuple[Any, str]]]:
    """The training DMatrix from this worker's shard, and the eval list: the training
    set first (``train-*`` metrics), then each other dataset in the order given (the
    last one drives early stopping)."""
    x, y = read_shard(TRAIN_DATASET, label)
    dtrain = xgboost.DMatrix(x, label=y, enable_categorical=True)
    evals = [(dtrain, TRAIN_DATASET)]
    for name in eval_names:
        xv, yv = read_shard(name, label)
        evals.append((xgboost.DMatrix(xv, label=yv, enable_categorical=True), name))
    return dtrain, evals


def _rank() -> int:
    from engine.session import get_context

    return get_context().get_world_rank()
