"""Breast cancer (scikit-learn's Wisconsin data set, 569 rows, 30 features): gradient-
boosted trees with XGBoost, data-parallel over the workers (``XGBoostTrainer``).

Hyperparameters are flat (``max_depth``, ``eta``, ``subsample``, ``num_boost_round`` …):
everything but ``num_boost_round`` goes into ``xgboost.train``'s params. The model is
checkpointed every ``checkpoint_frequency`` rounds, so a retried run resumes boosting
from the last checkpoint instead of round 0.
"""

from __future__ import annotations

from typing import Any, Dict

BASE_PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"],
               "tree_method": "hist"}
ROUNDS_KEY = "num_boost_round"
CHECKPOINT_FREQUENCY = 5
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


def _split_config(config: Dict[str, Any]) -> tuple:
    params = {k: v for k, v in config.items() if k != ROUNDS_KEY}
    return {**BASE_PARAMS, **params}, int(config.get(ROUNDS_KEY, 50))


def make_trainer(config: Dict[str, Any], datasets: Dict[str, Any], scaling_config: Any,
                 run_config: Any, metadata: Dict[str, Any]) -> Any:
    """``XGBoostTrainer``'s built-in loop: ``train`` split over the workers, ``validation``
    evaluated every round (``validation-logloss``, ``validation-error``)."""
    from engine.xgboost import XGBoostTrainer

    params, rounds = _split_config(config)
    return XGBoostTrainer(
        datasets=datasets, label_column=metadata.get("label_column") or SPEC.label_column,
        params=params, num_boost_round=rounds, checkpoint_frequency=CHECKPOINT_FREQUENCY,
        scaling_config=scaling_config, run_config=run_config, metadata=metadata)


def tune_space(space: Dict[str, Any]) -> Dict[str, Any]:
    """The Tuner's ``param_space`` for ``XGBoostTrainer``: rounds are a trainer argument,
    the rest are ``params``."""
    out: Dict[str, Any] = {"params": {k: v for k, v in space.items() if k != ROUNDS_KEY}}
    if ROUNDS_KEY in space:
        out[ROUNDS_KEY] = space[ROUNDS_KEY]
    return out


def config_of(result: Any) -> Dict[str, Any]:
    sampled = dict(result.config or {})
    flat = dict(sampled.get("params") or {})
    if ROUNDS_KEY in sampled:
        flat[ROUNDS_KEY] = sampled[ROUNDS_KEY]
    return flat


def _make_spec():
    from pipelines import PipelineSpec

    return PipelineSpec(
        name="breast_cancer",
        description="Wisconsin breast cancer (scikit-learn), XGBoost trees, data-parallel",
        framework="xgboost", source="sklearn:breast_cancer", label_column="target",
        task="classification", metric="validation-logloss", mode="min",
        defaults={"max_depth": 3, "eta": 0.3, "subsample": 1.0, ROUNDS_KEY: 50, "seed": 0},
        param_space={"max_depth": {"grid_search": [2, 4]},
                     "eta": {"grid_search": [0.1, 0.3]}},
        epochs_key=ROUNDS_KEY, gate={"accuracy": ">=0.9"},
        make_trainer=make_trainer, tune_space=tune_space, config_of=config_of,
        data_schema=DATA_SCHEMA, drift={"method": "psi", "threshold": 0.2, "fail": False})


SPEC = _make_spec()
