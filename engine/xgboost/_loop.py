"""The seed-style XGBoostTrainer's loop, run on every worker inside the collective."""

from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional, Tuple

from engine._internal.gbdt.data import TRAIN_DATASET, read_shard
from engine._internal.gbdt.loop import start_boosting
from engine._internal.run_state import timeline
from engine.xgboost.config import import_xgboost

_THREAD_PARAMS = ("nthread", "n_jobs")


def xgboost_seed_loop(config: Dict[str, Any],
                      train_kwargs: Optional[Dict[str, Any]] = None) -> None:
    """Build this worker's DMatrix from its shard, then boost to ``num_boost_round``
    rounds in all (continuing a checkpointed model), reporting every round."""
    xgboost = import_xgboost()
    from engine.xgboost.callback import ReportCallback

    kwargs = dict(train_kwargs or {})
    dtrain, evals = _matrices(xgboost, config["label_column"], config["eval_datasets"])
    timeline.mark("matrices_built")
    params = dict(config["params"])
    if not any(k in params for k in _THREAD_PARAMS):
        params["nthread"] = config["cpus_per_worker"]
    if config.get("use_gpu"):
        params.setdefault("device", "cuda")  # the GPU Ray gave this worker

    start = start_boosting(ReportCallback, operator.methodcaller("num_boosted_rounds"),
                           config, {"worker_train_rows": int(dtrain.num_row())}, kwargs)
    if start is None:
        return
    kwargs.setdefault("verbose_eval", False)
    timeline.mark("boosting_start")
    xgboost.train(params, dtrain, num_boost_round=start.rounds, evals=evals,
                  xgb_model=start.init_model, callbacks=start.callbacks, **kwargs)
    timeline.mark("boosting_end")  # the final report and its checkpoint included


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
