"""SklearnTrainer: fit a scikit-learn estimator on one worker of the engine."""

from __future__ import annotations

import functools
from typing import Any, Dict, Optional

from engine._internal.gbdt.data import TRAIN_DATASET
from engine._internal.gbdt.trainer import cpus_per_worker
from engine.checkpoint import Checkpoint
from engine.config import RunConfig, ScalingConfig
from engine.exceptions import ConfigError
from engine.sklearn._loop import sklearn_loop
from engine.sklearn.checkpoint import load_estimator
from engine.trainer import DataParallelTrainer


class SklearnTrainer(DataParallelTrainer):
    """Fits a scikit-learn estimator on one worker that holds
    ``ScalingConfig(trainer_resources={"CPU": n})``, using those CPUs through joblib:
    the estimator's ``n_jobs`` (and nested ``*__n_jobs``) parameters are set to ``n``,
    or, when it has none and ``cv`` is given, the folds run ``n`` at a time.

    One report, with the fitted estimator as the checkpoint (``model.pkl``) and::

        {"fit_time": s,
         "<dataset>": {"test_score": …, "score_time": s},  # every dataset but "train"
         "cv": {"test_score": [per fold], "test_score_mean": …, "fit_time": [...], …}}

    (``test_<name>`` for each scorer of a list or dict ``scoring``.)

    Args:
        estimator: An unfitted scikit-learn estimator (or anything with ``fit``).
        datasets: ``"train"`` is fitted on; the others are scored.
        label_column: The label column; None for unsupervised estimators.
        params: ``estimator.set_params(**params)`` first (tunable with a Tuner:
            ``param_space={"params": {...}}``).
        scoring: ``None`` (the estimator's ``score``), a scorer name or callable, or a
            list/dict of them, as for ``sklearn.model_selection.cross_validate``.
        cv: Folds to cross-validate ``datasets["train"]`` on (an int, a splitter, an
            iterable of splits); None: no cross-validation.
        return_train_score_cv: Also report the folds' training scores.
        parallelize_cv: Run folds in parallel instead of the estimator's own jobs; None
            decides by whether the estimator has an ``n_jobs``-like parameter.
        set_estimator_cpus: Set the estimator's ``n_jobs``-like parameters from the CPUs.
        scaling_config: ``trainer_resources`` (or ``resources_per_worker``) are the
            worker's resources; ``num_workers`` must be 1.
        run_config, preprocessor, metadata: As for
            :class:`engine.trainer.DataParallelTrainer`.
        **fit_params: Passed to ``estimator.fit`` (and to each fold's fit).

    Raises:
        ConfigError: a missing training set, more than one worker, or another argument
            that cannot work (the message says which).
    """

    _framework = "sklearn"

    def __init__(self, estimator: Any, *, datasets: Dict[str, Any],
                 label_column: Optional[str] = None,
                 params: Optional[Dict[str, Any]] = None,
                 scoring: Any = None, cv: Any = None,
                 return_train_score_cv: bool = False,
                 parallelize_cv: Optional[bool] = None,
                 set_estimator_cpus: bool = True,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 preprocessor: Optional[Any] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 **fit_params: Any) -> None:
        _check_args(estimator, datasets, label_column, params, scoring, cv, parallelize_cv)
        super().__init__(sklearn_loop, scaling_config=scaling_config, run_config=run_config,
                         datasets=datasets, metadata=metadata, preprocessor=preprocessor)
        _worker_scaling(self.scaling_config)  # fail now, not at fit()
        self.estimator = estimator
        self.label_column = label_column
        self.params = dict(params or {})
        self.scoring = scoring
        self.cv = cv
        self.return_train_score_cv = return_train_score_cv
        self.parallelize_cv = parallelize_cv
        self.set_estimator_cpus = set_estimator_cpus
        self.fit_params = fit_params

    def _builtin_loop(self) -> bool:
        return True

    def _run_spec(self):
        if self.run_config.checkpoint_config.checkpoint_at_end is False:
            raise ConfigError(
                "SklearnTrainer fits once and its one report carries the fitted model: "
                "CheckpointConfig(checkpoint_at_end=False) cannot apply. To write no "
                "checkpoint, use CheckpointConfig(num_to_keep=0).")
        scaling = _worker_scaling(self.scaling_config)
        self.train_loop_config = {
            "label_column": self.label_column, "params": dict(self.params),
            "scoring": self.scoring, "cv": self.cv,
            "return_train_score_cv": self.return_train_score_cv,
            "parallelize_cv": self.parallelize_cv,
            "set_estimator_cpus": self.set_estimator_cpus,
            "cpus": cpus_per_worker(scaling),
            "eval_datasets": [n for n in self.datasets if n != TRAIN_DATASET],
        }
        spec = super()._run_spec()
        spec.scaling_config = scaling
        spec.train_func = functools.partial(sklearn_loop, estimator=self.estimator,
                                            fit_params=self.fit_params)
        return spec

    def _model_card(self) -> Dict[str, Any]:
        from engine._internal.gbdt.data import known_feature_columns

        card = super()._model_card()
        if card.get("feature_columns") is None:
            card["feature_columns"] = known_feature_columns(
                self.datasets.get(TRAIN_DATASET), self.label_column, self.preprocessor)
        card["estimator"] = type(self.estimator).__name__
        return card

    @staticmethod
    def get_model(checkpoint: Checkpoint) -> Any:
        """The fitted estimator of a checkpoint of this trainer (unpickled: trusted
        checkpoints only)."""
        return load_estimator(checkpoint)


def _worker_scaling(scaling: ScalingConfig) -> ScalingConfig:
    """The one worker's ScalingConfig: ``trainer_resources`` (else
    ``resources_per_worker``, else 1 CPU)."""
    if scaling.num_workers != 1:
        raise ConfigError(
            f"SklearnTrainer fits on one worker, but ScalingConfig(num_workers="
            f"{scaling.num_workers}) was given: drop num_workers and give the worker CPUs "
            "with ScalingConfig(trainer_resources={'CPU': n}).")
    if scaling.use_gpu:
        raise ConfigError("SklearnTrainer runs on CPUs: set ScalingConfig(use_gpu=False).")
    resources = dict(scaling.trainer_resources or scaling.resources_per_worker
                     or {"CPU": 1})
    if resources.get("CPU", 0) < 1:
        raise ConfigError(f"SklearnTrainer needs at least 1 CPU, got trainer_resources="
                          f"{resources!r}: use e.g. {{'CPU': 2}}.")
    return ScalingConfig(num_workers=1, resources_per_worker=resources,
                         placement_strategy=scaling.placement_strategy)


def _check_args(estimator: Any, datasets: Any, label_column: Any, params: Any,
                scoring: Any, cv: Any, parallelize_cv: Any) -> None:
    if not callable(getattr(estimator, "fit", None)):
        raise ConfigError(f"SklearnTrainer(estimator=...) needs an estimator with fit(), "
                          f"got {type(estimator).__name__}.")
    if not isinstance(datasets, dict) or TRAIN_DATASET not in datasets:
        raise ConfigError("SklearnTrainer fits on datasets['train']: pass datasets={'train':"
                          " ..., 'validation': ...}.")
    if label_column is not None and not isinstance(label_column, str):
        raise ConfigError(f"label_column must be a column name or None, got {label_column!r}.")
    if params is not None and not isinstance(params, dict):
        raise ConfigError("SklearnTrainer(params=...) must be a dict for "
                          "estimator.set_params(**params).")
    if not (scoring is None or isinstance(scoring, (str, list, tuple, dict)) or callable(scoring)):
        raise ConfigError(f"scoring={scoring!r} is not a scorer name, callable, list or dict.")
    if isinstance(cv, bool) or (isinstance(cv, int) and cv < 2):
        raise ConfigError(f"cv={cv!r}: use an int >= 2 (folds), a splitter, or None.")
    if parallelize_cv and cv is None:
        raise ConfigError("parallelize_cv=True needs cv=... (there are no folds to run).")
