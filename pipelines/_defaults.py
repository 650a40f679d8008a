"""What a ``PipelineSpec`` does when it leaves something out: one default per framework
for its trainer, its metric, its search space and its predictor.

    torch, tensorflow   the spec's ``train_func(config, data)`` on every worker
                        (``TorchTrainer`` / ``TensorflowTrainer``), ``data`` a
                        ``pipelines.tabular.TabularData``; the config is the
                        ``train_loop_config``
    xgboost, lightgbm   ``XGBoostTrainer`` / ``LightGBMTrainer`` on the split's files:
                        ``params`` are the booster's fixed parameters, the flat config
                        the tuned ones, ``num_boost_round`` the rounds
    sklearn             ``SklearnTrainer`` on the spec's ``estimator``: ``params`` and
                        the flat config go to ``set_params``

Nothing here imports a framework until a trainer is built.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, Dict, Optional, Tuple

FRAMEWORKS = ("torch", "tensorflow", "xgboost", "lightgbm", "sklearn")
ROUNDS_KEY = "num_boost_round"
DEFAULT_EPOCHS = 10
DEFAULT_ROUNDS = 50
CHECKPOINT_FREQUENCY = 5  # boosting rounds between checkpoints: a retry resumes there
_MAXIMISED = ("accuracy", "auc", "aucpr", "map", "ndcg", "pre", "average_precision",
              "test_score", "r2")

_GBDT_BASE = {
    ("xgboost", "classification"): {"objective": "binary:logistic",
                                    "eval_metric": ["logloss", "error"], "tree_method": "hist"},
    ("xgboost", "regression"): {"objective": "reg:squarederror", "eval_metric": ["rmse"],
                                "tree_method": "hist"},
    ("lightgbm", "classification"): {"objective": "binary",
                                     "metric": ["binary_logloss", "binary_error"],
                                     "verbose": -1},
    ("lightgbm", "regression"): {"objective": "regression", "metric": ["l2"], "verbose": -1},
}
# The evaluation metric each objective family reports when the params name none.
_OBJECTIVE_METRIC = {
    "xgboost": (("multi:", "mlogloss"), ("binary:", "logloss"), ("reg:", "rmse"),
                ("count:", "poisson-nloglik"), ("rank:", "ndcg")),
    "lightgbm": (("multiclass", "multi_logloss"), ("binary", "binary_logloss"),
                 ("regression", "l2"), ("l2", "l2"), ("l1", "l1"), ("huber", "huber")),
}


# --- settings ---------------------------------------------------------------------------
def epochs_key(framework: str) -> Optional[str]:
    """The hyperparameter that counts epochs or rounds (None: the model has none)."""
    return {"xgboost": ROUNDS_KEY, "lightgbm": ROUNDS_KEY, "sklearn": None}.get(framework,
                                                                                "epochs")


def default_epochs(framework: str) -> Optional[int]:
    return {"xgboost": DEFAULT_ROUNDS, "lightgbm": DEFAULT_ROUNDS,
            "sklearn": None}.get(framework, DEFAULT_EPOCHS)


def gbdt_params(framework: str, task: str, params: Dict[str, Any]) -> Dict[str, Any]:
    """The booster's fixed parameters: the spec's ``params`` over a default objective and
    evaluation metrics for the task; an objective without metrics gets its usual one."""
    metric_key = "eval_metric" if framework == "xgboost" else "metric"
    if "objective" not in params:
        return {**_GBDT_BASE[(framework, task)], **params}
    out = dict(params)
    if metric_key not in out:
        found = _objective_metric(framework, str(out["objective"]))
        if found:
            out[metric_key] = [found]
    return out


def _objective_metric(framework: str, objective: str) -> Optional[str]:
    for prefix, metric in _OBJECTIVE_METRIC[framework]:
        if objective.startswith(prefix):
            return metric
    return None


def metric_and_mode(spec: Any) -> Tuple[str, str]:
    """The metric a spec without one is judged by, for its framework and task."""
    if spec.framework in ("torch", "tensorflow"):
        return ("val_accuracy", "max") if spec.task == "classification" else ("val_loss", "min")
    if spec.framework == "sklearn":
        return "validation/test_score", "max"
    params = gbdt_params(spec.framework, spec.task, spec.params)
    metrics = params.get("eval_metric" if spec.framework == "xgboost" else "metric")
    first = (metrics[0] if isinstance(metrics, (list, tuple)) and metrics else metrics)
    if not first:
        from pipelines._plugins import PipelinePluginError

        raise PipelinePluginError(
            f"PipelineSpec({spec.name!r}): its objective {params.get('objective')!r} has no "
            "default evaluation metric: set params['eval_metric' for xgboost, 'metric' for "
            "lightgbm] and metric='validation-<that metric>'.")
    return f"validation-{first}", ("max" if str(first).split("@")[0] in _MAXIMISED else "min")


# --- the default functions of a spec ------------------------------------------------------
def make_trainer(spec: Any, config: Dict[str, Any], datasets: Dict[str, Any],
                 scaling_config: Any, run_config: Any, metadata: Dict[str, Any]) -> Any:
    """The spec's framework's trainer (see the module docstring)."""
    maker = {"torch": _loop_trainer, "tensorflow": _loop_trainer, "xgboost": _gbdt_trainer,
             "lightgbm": _gbdt_trainer, "sklearn": _sklearn_trainer}[spec.framework]
    return maker(spec, dict(config), datasets, scaling_config, run_config, metadata)


def _preprocessor(spec: Any, metadata: Dict[str, Any]) -> Any:
    return spec.preprocessor(list(metadata["feature_columns"])) if spec.preprocessor else None


def call_train_func(config: Dict[str, Any], train_func: Callable[..., None],
                    data: Any) -> None:
    """What runs on each worker: the spec's ``train_func(config, data)``."""
    train_func(config, data)


def _loop_trainer(spec: Any, config: Dict[str, Any], datasets: Dict[str, Any],
                  scaling_config: Any, run_config: Any, metadata: Dict[str, Any]) -> Any:
    from pipelines.tabular import TabularData, resolve

    if "train" not in datasets:
        from engine.exceptions import ConfigError

        raise ConfigError(f"Pipeline {spec.name!r} trains on datasets 'train' (and "
                          f"'validation'), got {sorted(datasets)}: pass split()'s output.")
    data = TabularData({k: resolve(v) for k, v in datasets.items()}, metadata["label_column"],
                       metadata["feature_columns"], spec.task)
    preprocessor = _preprocessor(spec, metadata)
    if preprocessor is not None:
        # Fitted here, from the rows every worker reads anyway; the checkpoints keep it.
        data.preprocessor = preprocessor.fit(TabularData(data.sources, data.label_column,
                                                         task=spec.task).frame("train"))
    if spec.framework == "torch":
        from engine.torch import TorchTrainer as Trainer
    else:
        from engine.tensorflow import TensorflowTrainer as Trainer
    return Trainer(functools.partial(call_train_func, train_func=spec.train_func, data=data),
                   train_loop_config=config, scaling_config=scaling_config,
                   run_config=run_config, preprocessor=preprocessor, metadata=metadata)


def _gbdt_trainer(spec: Any, config: Dict[str, Any], datasets: Dict[str, Any],
                  scaling_config: Any, run_config: Any, metadata: Dict[str, Any]) -> Any:
    if spec.framework == "xgboost":
        from engine.xgboost import XGBoostTrainer as Trainer
    else:
        from engine.lightgbm import LightGBMTrainer as Trainer
    rounds_key = spec.epochs_key or ROUNDS_KEY
    params = {**gbdt_params(spec.framework, spec.task, spec.params),
              **{k: v for k, v in config.items() if k != rounds_key}}
    return Trainer(datasets=datasets, label_column=metadata["label_column"], params=params,
                   num_boost_round=int(config.get(rounds_key, DEFAULT_ROUNDS)),
                   checkpoint_frequency=CHECKPOINT_FREQUENCY, scaling_config=scaling_config,
                   run_config=run_config, metadata=metadata,
                   preprocessor=_preprocessor(spec, metadata))


def _sklearn_trainer(spec: Any, config: Dict[str, Any], datasets: Dict[str, Any],
                     scaling_config: Any, run_config: Any, metadata: Dict[str, Any]) -> Any:
    from engine import ScalingConfig
    from engine.sklearn import SklearnTrainer

    # One worker fits; the workers asked for become its CPUs (the estimator's n_jobs).
    cpus = max(1, int(getattr(scaling_config, "num_workers", 1) or 1))
    return SklearnTrainer(estimator=make_estimator(spec), datasets=datasets,
                          label_column=metadata["label_column"],
                          params={**spec.params, **config},
                          scaling_config=ScalingConfig(trainer_resources={"CPU": cpus}),
                          run_config=run_config, metadata=metadata,
                          preprocessor=_preprocessor(spec, metadata))


def make_estimator(spec: Any) -> Any:
    """A fresh, unfitted estimator from the spec's ``estimator`` (a class or factory, or
    ``"module:Class"``)."""
    factory = spec.estimator
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
    return factory()


def tune_space(spec: Any, space: Dict[str, Any]) -> Dict[str, Any]:
    """The Tuner's ``param_space`` for the spec's default trainer."""
    if spec.framework == "sklearn":
        return {"params": dict(space)}
    if spec.framework in ("xgboost", "lightgbm"):
        key = spec.epochs_key or ROUNDS_KEY
        out: Dict[str, Any] = {"params": {k: v for k, v in space.items() if k != key}}
        if key in space:
            out[key] = space[key]
        return out
    return {"train_loop_config": dict(space)}


def config_of(spec: Any, result: Any) -> Dict[str, Any]:
    """The flat hyperparameters a trial sampled (inverse of :func:`tune_space`)."""
    sampled = dict(result.config or {})
    if spec.framework in ("sklearn", "xgboost", "lightgbm"):
        flat = dict(sampled.get("params") or {})
        key = spec.epochs_key or ROUNDS_KEY
        if key in sampled:
            flat[key] = sampled[key]
        return flat
    return dict(sampled.get("train_loop_config") or {})


def predictor_kwargs(spec: Any, config: Dict[str, Any]) -> Dict[str, Any]:
    """The predictor's loading arguments: the spec's ``model(config)`` to load weights
    into (torch), and leave to unpickle a scikit-learn estimator this pipeline trained."""
    out: Dict[str, Any] = {}
    if spec.model is not None:
        out["model"] = spec.model(dict(config))
    if spec.framework == "sklearn":
        out["allow_pickle"] = True  # the pipeline's own checkpoints: trusted
    return out
