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
_MEASURES = ("radius", "texture", "perimeter", "area", "smoothness", "compactness",
             "concavity", "concave points", "symmetry", "fractal dimension")
#: The 30 features of scikit-learn's frame (each measure's mean, standard error and
#: worst value): non-negative, no nulls; a 0/1 label.
FEATURE_COLUMNS = [f"mean {m}" for m in _MEASURES] + [f"{m} error" for m in _MEASURES] \
    + [f"worst {m}" for m in _MEASURES]
DATA_SCHEMA = {
    "columns": {**{c: {"type": "float64", "nullable": False, "min": 0}
                   for c in FEATURE_COLUMNS},
                "target": {"type": "int", "nullable": False, "isin": [0, 1]}},
    "strict": True,
}

SPEC = PipelineSpec(
    name="breast_cancer",
    description="Wisconsin breast cancer (scikit-learn), XGBoost trees, data-parallel",
    framework="xgboost", source="sklearn:breast_cancer", label_column="target",
    task="classification", metric="validation-logloss", mode="min", params=BASE_PARAMS,
    defaults={"max_depth": 3, "eta": 0.3, "subsample": 1.0, ROUNDS_KEY: 50, "seed": 0},
    param_space={"max_depth": {"grid_search": [2, 4]}, "eta": {"grid_search": [0.1, 0.3]}},
    # An absolute floor, and never worse than the model in production on the same data.
    gate={"accuracy": [">=0.9", ">=champion"]},
    data_schema=DATA_SCHEMA, drift={"method": "psi", "threshold": 0.2, "fail": False})
