"""SklearnTrainer's loop: fit on one worker, score, cross-validate, checkpoint."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from engine._internal.gbdt.data import TRAIN_DATASET, read_shard

# Estimator parameters that set a thread or process count (scikit-learn's n_jobs, also
# in nested estimators as "<step>__n_jobs"; CatBoost's thread_count).
CPU_PARAM_SUFFIXES = ("n_jobs", "thread_count")


def cpu_params(estimator: Any) -> List[str]:
    """The estimator's (deep) parameters that set how many CPUs it uses."""
    return [k for k in estimator.get_params(deep=True) if k.endswith(CPU_PARAM_SUFFIXES)]


def sklearn_loop(config: Dict[str, Any], estimator: Any = None,
                 fit_params: Optional[Dict[str, Any]] = None) -> None:
    """Fit ``estimator`` on the whole training set, score it on every other dataset,
    cross-validate it if asked, and report all of that with the fitted estimator."""
    from sklearn.base import clone

    from engine.session import report
    from engine.sklearn.checkpoint import SklearnCheckpoint

    fit_params = dict(fit_params or {})
    if config["params"]:
        estimator.set_params(**config["params"])
    cpus, label = config["cpus"], config["label_column"]
    x, y = read_shard(TRAIN_DATASET, label)
    parallel_cv = _parallelize_cv(estimator, config)
    metrics: Dict[str, Any] = {}
    if config["cv"] is not None:
        cv_estimator = clone(estimator)
        if config["set_estimator_cpus"]:
            _set_cpus(cv_estimator, 1 if parallel_cv else cpus)
        metrics["cv"] = _cross_validate(cv_estimator, x, y, config, fit_params,
                                        n_jobs=cpus if parallel_cv else 1)
    if config["set_estimator_cpus"]:
        _set_cpus(estimator, cpus)
    start = time.perf_counter()
    estimator.fit(x, y, **fit_params)
    metrics["fit_time"] = time.perf_counter() - start
    for name in config["eval_datasets"]:
        xv, yv = read_shard(name, label)
        start = time.perf_counter()
        scores = _scores(estimator, xv, yv, config["scoring"])
        metrics[name] = dict(scores, score_time=time.perf_counter() - start)
    report(metrics, checkpoint=SklearnCheckpoint.from_estimator(estimator))


def _parallelize_cv(estimator: Any, config: Dict[str, Any]) -> bool:
    """Folds in parallel (``parallelize_cv``), or, when unset, whenever the estimator has
    no parallelism of its own to use the CPUs."""
    if config["cv"] is None:
        return False
    if config["parallelize_cv"] is not None:
        return bool(config["parallelize_cv"])
    return not cpu_params(estimator)


def _set_cpus(estimator: Any, cpus: int) -> None:
    names = cpu_params(estimator)
    if names:
        estimator.set_params(**{name: cpus for name in names})


def _scores(estimator: Any, x: Any, y: Any, scoring: Any) -> Dict[str, float]:
    """``{"test_score": …}`` for one scorer (the estimator's ``score`` when None), or
    ``{"test_<name>": …}`` for a list or dict of them, as ``cross_validate`` names them."""
    from sklearn.metrics import check_scoring, get_scorer

    if scoring is None or isinstance(scoring, str) or callable(scoring):
        return {"test_score": float(check_scoring(estimator, scoring=scoring)(estimator, x, y))}
    if isinstance(scoring, dict):
        scorers = {n: get_scorer(s) if isinstance(s, str) else s for n, s in scoring.items()}
    else:
        scorers = {n: get_scorer(n) for n in scoring}
    return {f"test_{n}": float(s(estimator, x, y)) for n, s in scorers.items()}


def _cross_validate(estimator: Any, x: Any, y: Any, config: Dict[str, Any],
                    fit_params: Dict[str, Any], n_jobs: int) -> Dict[str, Any]:
    """``cross_validate``'s per-fold lists (``test_score``, ``fit_time`` …) plus their
    ``_mean`` and ``_std``."""
    import numpy as np
    from sklearn.model_selection import cross_validate

    results = cross_validate(estimator, x, y, cv=config["cv"], scoring=config["scoring"],
                             return_train_score=config["return_train_score_cv"],
                             n_jobs=n_jobs, params=fit_params or None)
    out: Dict[str, Any] = {}
    for key, values in results.items():
        values = np.asarray(values, dtype=float)
        out[key] = values.tolist()
        out[f"{key}_mean"] = float(values.mean())
        out[f"{key}_std"] = float(values.std())
    return out
