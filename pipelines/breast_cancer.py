"""Breast cancer (scikit-learn's Wisconsin data set, 569 rows, 30 features): gradient-
boosted trees with XGBoost, data-parallel over the workers (``XGBoostTrainer``).

The short form of a pipeline: a framework and its parameters, the rest defaults
(``pipelines._defaults``). Hyperparameters are flat (``max_depth``, ``eta``,
``subsample``, ``num_boost_round`` …): everything but ``num_boost_round`` goes into
``xgboost.train``'s params over ``BASE_PARAMS``. The model is checkpointed every 5
rounds, so a retried run resumes boosting from the last checkpoint instead of round 0.
"""

from __future__ import annotations

from pipelines import PipelineSpec

BASE_PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"],
               "tree_method": "hist"}
ROUNDS_KEY = "num_boost_round"

SPEC = PipelineSpec(
    name="breast_cancer",
    description="Wisconsin breast cancer (scikit-learn), XGBoost trees, data-parallel",
    framework="xgboost", source="sklearn:breast_cancer", label_column="target",
    task="classification", metric="validation-logloss", mode="min", params=BASE_PARAMS,
    defaults={"max_depth": 3, "eta": 0.3, "subsample": 1.0, ROUNDS_KEY: 50, "seed": 0},
    param_space={"max_depth": {"grid_search": [2, 4]}, "eta": {"grid_search": [0.1, 0.3]}},
    # An absolute floor, and never worse than the model in production on the same data.
    gate={"accuracy": [">=0.9", ">=champion"]})
