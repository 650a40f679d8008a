"""The base of the tree trainers (XGBoost, LightGBM): :class:`GBDTTrainer`.

Two ways to build one. Seed style (``label_column=``, ``params=``, ``num_boost_round=``:
the trainer's own loop runs on every worker) or function style
(``train_loop_per_worker=f``: ``f`` builds its matrix and calls the framework's
``train`` itself). Either way only ``datasets["train"]`` is split by default; the other
datasets (eval sets) reach every worker whole.

No framework is imported here.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional, Tuple

from engine._internal.gbdt.data import TRAIN_DATASET, known_feature_columns
from engine.checkpoint import Checkpoint
from engine.config import DataConfig, RunConfig, ScalingConfig
from engine.exceptions import ConfigError
from engine.trainer import DataParallelTrainer

DEFAULT_NUM_BOOST_ROUND = 10


def default_data_config() -> DataConfig:
    """Split the training set across workers; give eval sets whole to every worker."""
    return DataConfig(datasets_to_split=[TRAIN_DATASET])


def cpus_per_worker(scaling: ScalingConfig) -> int:
    """Threads a worker's framework should use: its CPU reservation, at least 1."""
    return max(1, int(scaling.worker_resources.get("CPU", 1)))


# --- the trainer base --------------------------------------------------------------------
class GBDTTrainer(DataParallelTrainer):
    """Base of :class:`~engine.xgboost.XGBoostTrainer` and
    :class:`~engine.lightgbm.LightGBMTrainer` (see their docstrings for the arguments).

    A subclass passes its framework's config as ``backend_config`` and sets
    ``_seed_loop``, ``_reserved_train_kwargs`` and, where needed, ``_check_params`` and
    ``_wrap_train_func``; every other argument is this class's. Arguments this class
    does not know are the built-in loop's ``train()`` arguments.
    """

    #: The framework's seed-style loop ``loop(config, train_kwargs=None)``.
    _seed_loop: Callable[..., None]
    #: ``train()`` arguments the built-in loop sets itself (not allowed in train_kwargs).
    _reserved_train_kwargs: Tuple[str, ...] = ()

    def __init__(self, train_loop_per_worker: Optional[Callable] = None, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 backend_config: Any = None,
                 label_column: Optional[str] = None,
                 params: Optional[Dict[str, Any]] = None,
                 num_boost_round: Optional[int] = None,
                 checkpoint_frequency: int = 0,
                 checkpoint_at_end: bool = True,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 preprocessor: Optional[Any] = None,
                 **train_kwargs: Any) -> None:
        name = type(self).__name__
        self._seed_style = train_loop_per_worker is None
        if self._seed_style:
            _check_seed_args(name, datasets, label_column, params, num_boost_round,
                             train_loop_config)
        else:
            _check_function_args(name, label_column, params, num_boost_round, train_kwargs,
                                 checkpoint_frequency, checkpoint_at_end)
        _check_checkpointing(name, checkpoint_frequency, checkpoint_at_end)
        reserved = sorted(set(train_kwargs or {}) & set(self._reserved_train_kwargs))
        if reserved:
            raise ConfigError(
                f"{name}: {', '.join(reserved)} are set by the built-in loop: eval sets come "
                "from datasets={...} (every name but 'train'), the model to continue from "
                "from resume_from_checkpoint=..., the parameters from params=...")
        super().__init__(
            train_loop_per_worker or type(self)._seed_loop,
            train_loop_config=train_loop_config, scaling_config=scaling_config,
            run_config=run_config, backend_config=backend_config, datasets=datasets,
            dataset_config=dataset_config or default_data_config(),
            resume_from_checkpoint=resume_from_checkpoint, metadata=metadata,
            preprocessor=preprocessor)
        self.label_column = label_column
        self.params = dict(params or {})
        self.num_boost_round = (DEFAULT_NUM_BOOST_ROUND if num_boost_round is None
                                else num_boost_round)
        self.checkpoint_frequency = checkpoint_frequency
        self.checkpoint_at_end = checkpoint_at_end
        self.train_kwargs = dict(train_kwargs or {})
        self._check_params()

    def _check_params(self) -> None:
        """Framework-specific checks of ``params`` (e.g. a tree learner that needs all
        the data on every worker)."""

    def _builtin_loop(self) -> bool:
        return self._seed_style

    def _seed_config(self) -> Dict[str, Any]:
        """The seed-style loop's ``config`` (JSON-able: it is recorded with the run)."""
        frequency, at_end = self.run_config.checkpoint_config.builtin_loop_checkpointing(
            type(self).__name__, self.checkpoint_frequency, self.checkpoint_at_end)
        return {
            "label_column": self.label_column,
            "params": dict(self.params),
            "num_boost_round": self.num_boost_round,
            "checkpoint_frequency": frequency,
            "checkpoint_at_end": at_end,
            "eval_datasets": [n for n in self.datasets if n != TRAIN_DATASET],
            "cpus_per_worker": cpus_per_worker(self.scaling_config),
            "use_gpu": self.scaling_config.use_gpu,
        }

    def _run_spec(self):
        if self._seed_style:
            # Read here, not in __init__, so that a Tuner's param_space={"params": ...,
            # "num_boost_round": ...} (set on a copy of this trainer) takes effect.
            self._check_params()
            self.train_loop_config = self._seed_config()
        spec = super()._run_spec()
        if self._seed_style and self.train_kwargs:
            spec.train_func = functools.partial(type(self)._seed_loop,
                                                train_kwargs=self.train_kwargs)
        spec.train_func = self._wrap_train_func(spec.train_func)
        # The built-in loop reads every dataset with read_shard, which takes files a
        # worker reads itself; with a preprocessor the datasets are Ray Datasets anyway.
        spec.read_files_directly = self._seed_style and self.preprocessor is None
        return spec

    def _wrap_train_func(self, train_func: Callable) -> Callable:
        """What runs on each worker around the training function (a collective)."""
        return train_func

    def _model_card(self) -> Dict[str, Any]:
        card = super()._model_card()
        if card.get("feature_columns") is None and self._seed_style:
            card["feature_columns"] = known_feature_columns(
                self.datasets.get(TRAIN_DATASET), self.label_column, self.preprocessor)
        return card


def _check_seed_args(name: str, datasets: Optional[Dict[str, Any]],
                     label_column: Optional[str], params: Any, num_boost_round: Any,
                     train_loop_config: Any) -> None:
    if not datasets or TRAIN_DATASET not in datasets:
        raise ConfigError(
            f"{name} trains on datasets['train']: pass datasets={{'train': ..., "
            f"'validation': ...}} (got {sorted(datasets or {}) or 'none'}), or pass "
            "train_loop_per_worker=f to read the data yourself.")
    if not isinstance(label_column, str) or not label_column:
        raise ConfigError(f"{name} needs label_column='<name of the label column>' (or "
                          "train_loop_per_worker=f to build the matrix yourself).")
    if params is not None and not isinstance(params, dict):
        raise ConfigError(f"{name}(params=...) must be a dict of the framework's "
                          f"parameters, got {type(params).__name__}.")
    if num_boost_round is not None and (
            not isinstance(num_boost_round, int) or isinstance(num_boost_round, bool)
            or num_boost_round < 1):
        raise ConfigError(f"{name}(num_boost_round={num_boost_round!r}) must be an "
                          "integer >= 1.")
    if train_loop_config is not None:
        raise ConfigError(f"{name}(train_loop_config=...) is the config of "
                          "train_loop_per_worker; without one, use params=... instead.")


def _check_function_args(name: str, label_column: Any, params: Any, num_boost_round: Any,
                         train_kwargs: Optional[Dict[str, Any]], frequency: Any,
                         at_end: Any) -> None:
    given = [k for k, v in (("label_column", label_column), ("params", params),
                            ("num_boost_round", num_boost_round)) if v is not None]
    if frequency != 0 or at_end is not True:
        given += ["checkpoint_frequency/checkpoint_at_end (give them to ReportCallback)"]
    given += sorted(train_kwargs or {})
    if given:
        raise ConfigError(
            f"{name}: {', '.join(given)} belong to the built-in training loop, but "
            "train_loop_per_worker was given too (it calls the framework's train() "
            "itself). Pass one or the other; put your own settings in "
            "train_loop_config.")


def _check_checkpointing(name: str, frequency: Any, at_end: Any) -> None:
    if not isinstance(frequency, int) or isinstance(frequency, bool) or frequency < 0:
        raise ConfigError(f"{name}(checkpoint_frequency={frequency!r}) must be an integer "
                          ">= 0 (0: only at the end).")
    if not isinstance(at_end, bool):
        raise ConfigError(f"{name}(checkpoint_at_end={at_end!r}) must be True or False.")
