"""Trainers: ``BaseTrainer`` and the ``DataParallelTrainer`` every framework builds on."""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional

from engine._internal.execution.controller import Controller, RunSpec
from engine._internal.run_state.identity import dataset_identity
from engine._internal.worker_group.backend import BackendConfig
from engine.checkpoint import Checkpoint
from engine.config import DataConfig, RunConfig, ScalingConfig, check_no_search_space
from engine.exceptions import ConfigError
from engine.result import Result

logger = logging.getLogger("engine")


class BaseTrainer:
    """A trainer runs a training job and returns a :class:`Result` from ``fit()``."""

    def fit(self) -> Result:
        raise NotImplementedError

    @classmethod
    def restore(cls, path: str, datasets: Optional[Dict[str, Any]] = None, *,
                storage_filesystem: Any = None, **kwargs: Any) -> "BaseTrainer":
        """The trainer whose ``fit()`` ran in ``path``, set up so that ``fit()``
        resumes that run from its latest checkpoint (a finished run returns its Result).

        Args:
            path: The run directory (``Result.path``): local path or URI.
            datasets: Datasets to pass again; those given as paths were kept, the
                others (Ray Datasets, DataFrames) must be given.
            storage_filesystem: The ``pyarrow.fs`` filesystem of ``path``, if needed.
            **kwargs: Replace ``train_loop_per_worker``, ``train_loop_config``,
                ``scaling_config``, ``preprocessor`` or ``resume_from_checkpoint``.

        Raises:
            FileNotFoundError: ``path`` holds no trainer (see :meth:`can_restore`).
            ConfigError: another trainer class wrote it, or a dataset is missing.
        """
        from engine._internal.execution.trainer_state import restore_trainer

        return restore_trainer(cls, path, datasets, storage_filesystem, kwargs)

    @classmethod
    def can_restore(cls, path: str, storage_filesystem: Any = None) -> bool:
        """Whether ``path`` is a run directory that :meth:`restore` can resume."""
        from engine._internal.execution.trainer_state import can_restore

        return can_restore(path, storage_filesystem)

    def _run_and_keep(self, spec: RunSpec) -> Result:
        """Run ``spec``, keeping this trainer in the run directory for :meth:`restore`
        once the run is this driver's and its storage is checked (a bad storage path is
        a StorageError, another driver's live run a RunInProgressError, writing nothing)."""
        from engine._internal.execution.trainer_state import save_trainer

        from engine._internal.worker_group.pool import resettable, shared_pool

        pool = shared_pool()
        if pool is not None and resettable(spec.backend_config):
            # Inside engine.reuse_workers(): start on an idle group of the same shape
            # (e.g. a tune's), and leave the workers to the block when done.
            controller = Controller(spec, worker_group_cls=pool.factory(exclusive=True))
        else:
            controller = Controller(spec)
        controller.after_initialize = lambda: save_trainer(self, controller.storage)
        return controller.run()


class DataParallelTrainer(BaseTrainer):
    """Runs ``train_loop_per_worker`` on ``num_workers`` Ray actors.

    Args:
        train_loop_per_worker: ``f(config)`` or ``f()``, run on every worker.
        train_loop_config: The ``config`` passed to it.
        scaling_config: Number of workers and their resources.
        run_config: Name, storage, checkpoint retention, retries, callbacks.
        backend_config: Framework setup done before the loop starts.
        datasets: Name → ``ray.data.Dataset``, pandas DataFrame or Parquet/CSV path;
            read on the workers with ``get_dataset_shard(name)``.
        dataset_config: Which datasets are split across workers.
        resume_from_checkpoint: Given to ``get_checkpoint()`` when the run has none yet.
        metadata: Free-form JSON-able dict kept with the run.
        preprocessor: An ``engine.preprocessors.Preprocessor`` or a
            ``ray.data.preprocessors`` one (``OneHotEncoder``, ``Chain`` …): fitted on
            ``datasets["train"]`` unless already fitted, applied to every dataset before
            it is split, and saved in each checkpoint (``Checkpoint.get_preprocessor()``).

    Raises (from ``fit``):
        TrainingFailedError: a worker failed and retries are exhausted.
    """

    _default_backend_config: Callable[[], BackendConfig] = BackendConfig

    def __init__(self, train_loop_per_worker: Callable, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 backend_config: Optional[BackendConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 preprocessor: Optional[Any] = None) -> None:
        if not callable(train_loop_per_worker):
            raise ConfigError(
                f"train_loop_per_worker must be a function, got "
                f"{type(train_loop_per_worker).__name__}."
            )
        _check_train_func(train_loop_per_worker)
        if train_loop_config is not None and not isinstance(train_loop_config, dict):
            raise ConfigError("train_loop_config must be a dict (it becomes `config`).")
        for name, value, cls in (("scaling_config", scaling_config, ScalingConfig),
                                 ("run_config", run_config, RunConfig),
                                 ("dataset_config", dataset_config, DataConfig)):
            if value is not None and not isinstance(value, cls):
                hint = (f" ({cls.__name__}(**your_dict) converts a dict)"
                        if isinstance(value, dict) else "")
                raise ConfigError(f"{name} must be an engine.{cls.__name__}, got "
                                  f"{type(value).__name__}{hint}.")
        if datasets is not None and not isinstance(datasets, dict):
            raise ConfigError(
                "datasets must be a dict of name -> dataset, e.g. datasets={'train': ds, "
                f"'validation': val_ds}}; got {type(datasets).__name__}.")
        if resume_from_checkpoint is not None and not isinstance(resume_from_checkpoint,
                                                                 Checkpoint):
            raise ConfigError(
                "resume_from_checkpoint must be an engine.Checkpoint (e.g. result.checkpoint)."
            )
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = train_loop_config
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config or RunConfig()
        self.backend_config = backend_config or self._default_backend_config()
        self.datasets = dict(datasets or {})
        if self.datasets:
            from engine._internal.data.datasets import check_dataset_inputs

            check_dataset_inputs(self.datasets)
        self.dataset_config = dataset_config or DataConfig()
        self.resume_from_checkpoint = resume_from_checkpoint
        self.metadata = metadata or {}
        if preprocessor is not None:
            from engine.preprocessors import as_preprocessor

            # Ray Data's own preprocessors are wrapped (engine.preprocessors.RayDataPreprocessor).
            preprocessor = as_preprocessor(preprocessor)
        self.preprocessor = preprocessor

    def _worker_env(self) -> Dict[str, str]:
        return {}

    def _check_resume_checkpoint(self) -> None:
        """A checkpoint another framework's trainer wrote cannot seed this one: say so
        before any worker starts (checkpoints without a model card pass)."""
        ckpt = self.resume_from_checkpoint
        if ckpt is None:
            return
        card = ckpt.get_model_card() or {}
        found = card.get("framework")
        if found in (None, "", "generic", self._framework) or self._framework == "generic":
            return
        from engine.exceptions import FrameworkMismatchError

        raise FrameworkMismatchError(
            f"resume_from_checkpoint {ckpt.path!r} was written by {card.get('trainer')!r} "
            f"(framework {found!r}); {type(self).__name__} trains {self._framework!r} "
            f"models and cannot resume from it. Resume with the {found!r} trainer, or start "
            "without resume_from_checkpoint.", found, self._framework)

    #: Trainers whose own loop reports (XGBoost, LightGBM, sklearn) honour
    #: CheckpointConfig(checkpoint_frequency, checkpoint_at_end); a train_loop_per_worker
    #: checkpoints where it calls report(checkpoint=...).
    def _builtin_loop(self) -> bool:
        return False

    def _check_checkpoint_config(self) -> None:
        cc = self.run_config.checkpoint_config
        if cc is not None and cc.sets_builtin_loop and not self._builtin_loop():
            raise ConfigError(
                f"CheckpointConfig(checkpoint_frequency={cc.checkpoint_frequency}, "
                f"checkpoint_at_end={cc.checkpoint_at_end}) is for trainers with a built-in "
                f"loop (XGBoost/LightGBM with label_column=..., RLTrainer); "
                f"{type(self).__name__} runs your train_loop_per_worker, which checkpoints "
                "when it calls engine.report(metrics, checkpoint=...): drop the two fields.")

    def _run_spec(self) -> RunSpec:
        for config in (self.scaling_config, self.dataset_config):
            check_no_search_space(config, "put it in a Tuner's param_space")
        self._check_resume_checkpoint()
        self._check_checkpoint_config()
        datasets = self.datasets
        if self.preprocessor is not None:
            from engine._internal.data.datasets import prepare_datasets

            datasets = prepare_datasets(self.datasets, self.preprocessor)
        spec = RunSpec(
            train_func=self.train_loop_per_worker,
            train_loop_config=self.train_loop_config,
            scaling_config=self.scaling_config,
            run_config=self.run_config,
            backend_config=self.backend_config,
            trainer_name=type(self).__name__,
            datasets=datasets,
            data_config=self.dataset_config,
            resume_from_checkpoint=self.resume_from_checkpoint,
            worker_env=self._worker_env(),
        )
        # The controller saves it into each committed checkpoint (engine.preprocessors.save_preprocessor).
        spec.preprocessor = self.preprocessor
        spec.model_card = self._model_card()
        spec.dataset_identity = dataset_identity(self.datasets or {})
        if spec.model_card.get("data_fingerprint"):
            spec.dataset_identity["data_fingerprint"] = str(spec.model_card["data_fingerprint"])
        spec.continues_stored_run = bool(getattr(self, "_continues_stored_run", False))
        return spec

    #: Written into model cards; framework trainers override it ("torch", "xgboost" …).
    _framework = "generic"

    def _model_card(self) -> Dict[str, Any]:
        """What prediction needs to know about this model besides its weights.

        ``metadata`` may give ``feature_columns``, ``label_column`` and
        ``data_fingerprint``; trainers with a ``label_column`` argument fill it in.
        """
        meta = self.metadata or {}
        return {
            "framework": self._framework,
            "trainer": type(self).__name__,
            "feature_columns": meta.get("feature_columns"),
            "label_column": meta.get("label_column", getattr(self, "label_column", None)),
            "data_fingerprint": meta.get("data_fingerprint"),
            "metadata": meta,
        }

    def fit(self) -> Result:
        """Run training to the end and return its :class:`Result`."""
        return self._run_and_keep(self._run_spec())


def _check_train_func(train_func: Callable) -> None:
    """Fail at construction, not on the workers: a signature the engine cannot call, or
    a function that cannot be pickled to ship to them (naming what it captures)."""
    import inspect

    try:
        params = inspect.signature(train_func).parameters.values()
    except (TypeError, ValueError):
        params = None
    if params is not None:
        required = [p.name for p in params
                    if p.default is inspect.Parameter.empty
                    and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if len(required) > 1:
            raise ConfigError(
                f"train_loop_per_worker {getattr(train_func, '__name__', train_func)!r} "
                f"takes ({', '.join(required)}): it must take no argument or one (config), "
                "e.g. def train_func(config): ...; put the rest in train_loop_config.")
    from engine._internal.execution.pickling import check_picklable

    check_picklable(train_func, "train_loop_per_worker")
