"""What the gradient-boosted-tree integrations (``engine.xgboost``,
``engine.lightgbm``) share; the scikit-learn trainer reads its data and scores its
batches with part of it too.

Each module holds the framework-neutral half of one piece, and the framework packages
keep what differs (the library calls: DMatrix vs Dataset, the Booster class and its
file name, the collective set-up, parameter names):

- :mod:`.trainer`: ``GBDTTrainer``, the seed-style and function-style trainer.
- :mod:`.loop`: how a built-in loop starts (``start_boosting``, ``rounds_left``).
- :mod:`.callback`: ``BoosterReportCallback`` and the per-round reporting rules.
- :mod:`.checkpoint`: ``BoosterCheckpoint``, a booster (and its class) in its
  framework's file format.
- :mod:`.predictor`: ``BoosterPredictor``, ``ModelFeatureNames``, ``features_frame``.
- :mod:`.config`: ``GBDTConfig``, ``import_framework``, the workers' collective
  parameters.
- :mod:`.data`: ``read_shard``, ``known_feature_columns``, ``TRAIN_DATASET``.

No framework is imported here, nor any submodule until one is used: the names the
former ``engine/_internal/gbdt.py`` held are still importable from this package.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "TRAIN_DATASET": "data", "read_shard": "data", "known_feature_columns": "data",
    "DEFAULT_NUM_BOOST_ROUND": "trainer", "default_data_config": "trainer",
    "cpus_per_worker": "trainer", "GBDTTrainer": "trainer",
    "metric_key": "callback", "checkpoint_due": "callback", "select_metrics": "callback",
    "is_rank_zero": "callback", "rounds_left": "loop",
    "features_frame": "predictor", "ModelFeatureNames": "predictor",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'engine._internal.gbdt' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
