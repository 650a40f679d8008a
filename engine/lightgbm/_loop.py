"""The seed-style LightGBMTrainer's loop, run on every worker."""

from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional, Tuple

from engine._internal.gbdt.data import (TRAIN_DATASET, arrow_split, pandas_split,
                                        read_shard_table)
from engine._internal.gbdt.loop import start_boosting
from engine._internal.run_state import timeline
from engine.lightgbm.config import get_network_params, import_lightgbm

# LightGBM's aliases of num_threads and tree_learner (its docs' Parameters page).
THREAD_PARAMS = ("num_threads", "num_thread", "nthread", "nthreads", "n_jobs")
TREE_LEARNER_PARAMS = ("tree_learner", "tree", "tree_type", "tree_learner_type")


def lightgbm_seed_loop(config: Dict[str, Any],
                       train_kwargs: Optional[Dict[str, Any]] = None) -> None:
    """Build this worker's Dataset from its shard, join the network, and boost to
    ``num_boost_round`` rounds in all (continuing a checkpointed model)."""
    lightgbm = import_lightgbm()
    from engine.lightgbm.callback import ReportCallback

    kwargs = dict(train_kwargs or {})
    params = _params(config)
    dtrain, valid_sets, valid_names, rows = _datasets(lightgbm, config["label_column"],
                                                      config["eval_datasets"])
    start = start_boosting(ReportCallback, operator.methodcaller("current_iteration"),
                           config, {"worker_train_rows": rows}, kwargs)
    if start is None:
        return
    # LightGBM bins the data and joins the network inside train(), before round 1.
    timeline.mark("boosting_start")
    booster = lightgbm.train(params, dtrain, num_boost_round=start.rounds,
                             valid_sets=valid_sets, valid_names=valid_names,
                             init_model=start.init_model, callbacks=start.callbacks, **kwargs)
    start.callback.finish(booster)  # early stopping: the final model in one more report
    timeline.mark("boosting_end")  # the final report and its checkpoint included
    if "machines" in params:
        booster.free_network()  # close the listening port now, not at garbage collection


def _params(config: Dict[str, Any]) -> Dict[str, Any]:
    params = dict(config["params"])
    network = get_network_params()
    if network and any(alias in params for alias in TREE_LEARNER_PARAMS):
        network.pop("tree_learner")  # the user's choice ("voting") stands
    params.update(network)
    if not any(k in params for k in THREAD_PARAMS):
        params["num_threads"] = config["cpus_per_worker"]
    return params


def _datasets(lightgbm: Any, label: str, eval_names: List[str]
              ) -> Tuple[Any, List[Any], List[str], int]:
    """The training Dataset from this worker's shard, the eval sets (the training set
    first, for ``train-*`` metrics, then each other dataset, binned like the training
    set) with their names, and the number of training rows."""
    x, y = _features_and_label(lightgbm, TRAIN_DATASET, label)
    dtrain = lightgbm.Dataset(x, label=y, free_raw_data=True)
    if dtrain.pandas_categorical is None:  # Arrow input: no pandas categories, as a
        dtrain.pandas_categorical = []     # numeric DataFrame's model file says
    valid_sets, valid_names = [dtrain], [TRAIN_DATASET]
    for name in eval_names:
        xv, yv = _features_and_label(lightgbm, name, label)
        valid_sets.append(lightgbm.Dataset(xv, label=yv, reference=dtrain))
        valid_names.append(name)
    return dtrain, valid_sets, valid_names, len(x)


def _features_and_label(lightgbm: Any, name: str, label: str) -> Tuple[Any, Any]:
    """A shard as LightGBM's input: the Arrow table itself where LightGBM takes it as
    is (4.7+, numeric columns without nulls), which skips a pandas copy of the shard
    and LightGBM's own conversion of it (about a fifth of the Dataset's construction
    here); a pandas DataFrame otherwise (categories, strings, nulls, older LightGBM).
    Both give the same bins and the same model."""
    table = read_shard_table(name)
    arrow = arrow_split(table, name, label) if _takes_arrow(lightgbm) else None
    return arrow if arrow is not None else pandas_split(table, name, label)


def _takes_arrow(lightgbm: Any) -> bool:
    """LightGBM 4.7 builds a Dataset from any Arrow stream (through narwhals, with no
    optional package); 4.2-4.6 needed cffi for it."""
    try:
        major, minor = (int(p) for p in lightgbm.__version__.split(".")[:2])
    except ValueError:  # a development version string
        return False
    return (major, minor) >= (4, 7)
