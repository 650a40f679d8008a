"""TransformersTrainer: a ``transformers.Trainer`` on every worker, DDP across them.

transformers is imported in the workers (and by the predictor), never by constructing
the trainer on the driver.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Optional

from torch.utils.data import Dataset, IterableDataset

from engine.checkpoint import Checkpoint
from engine.config import DataConfig, RunConfig, ScalingConfig
from engine.exceptions import CheckpointError, ConfigError
from engine.huggingface._backend import HuggingFaceTorchConfig, forwarded_env, scratch_cwd
from engine.torch.config import TorchConfig
from engine.torch.trainer import TorchTrainer

logger = logging.getLogger("engine")

EVAL_DATASET_KEYS = ("evaluation", "validation")
TRAINER_STATE_FILE = "trainer_state.json"
INSTALL_HINT = "pip install 'trainyard[huggingface]'"


def require(module: str) -> None:
    """Fail on the driver, before any worker starts, when a framework is missing."""
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"engine.huggingface needs {module}: {INSTALL_HINT}")


class TransformersTrainer(TorchTrainer):
    """Runs a ``transformers.Trainer`` on every worker, with DDP across the workers.

    Each worker calls ``trainer_init_per_worker(train_dataset, eval_dataset, **config)``
    (``config`` is ``trainer_init_config``) and trains the Trainer it returns. The torch
    process group is set up first, so the Trainer trains with DDP across the workers
    (gloo on CPU, nccl with ``use_gpu=True``). What the Trainer logs is reported each
    round and each checkpoint it saves becomes a trainyard checkpoint (see
    :class:`engine.huggingface.TrainReportCallback`, added for you); a retried or
    re-run ``fit()`` resumes the Trainer from the latest one
    (``trainer.train(resume_from_checkpoint=...)``: weights, optimizer, scheduler, RNG
    states and step).

    ``datasets``: ``"train"`` and ``"evaluation"`` (or ``"validation"``), each a torch
    ``Dataset`` (given to every worker as it is; the Trainer gives each rank its part),
    or a ``ray.data.Dataset``, pandas DataFrame or Parquet/CSV path: then ``"train"`` is
    split across the workers and each worker's shard is held in memory as a map-style
    dataset of row dicts (the Trainer then trains each rank on its own shard), while the
    evaluation set reaches every worker whole and the Trainer shards it as usual.

    Relative paths in ``TrainingArguments`` (``output_dir`` …) are relative to a scratch
    directory per run and node, ``$TMPDIR/trainyard/<run name>/``.

    Args:
        trainer_init_per_worker: ``f(train_dataset, eval_dataset, **config)`` returning a
            ``transformers.Trainer``; the datasets are None when not given.
        trainer_init_config: Its ``config`` (also reachable as ``train_loop_config``, so
            a Tuner's ``param_space`` may use either name).
        torch_config: Process-group settings (backend, timeout).
        scaling_config, run_config, datasets, dataset_config, resume_from_checkpoint,
        metadata, preprocessor: As for :class:`engine.torch.TorchTrainer`.

    Raises:
        ConfigError: a bad argument (the message says which and how to fix it).
        ImportError: transformers is not installed.
    """

    _framework = "transformers"

    def __init__(self, trainer_init_per_worker: Callable[..., Any], *,
                 trainer_init_config: Optional[Dict[str, Any]] = None,
                 torch_config: Optional[TorchConfig] = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 preprocessor: Optional[Any] = None) -> None:
        if not callable(trainer_init_per_worker):
            raise ConfigError(
                "trainer_init_per_worker must be a function f(train_dataset, eval_dataset, "
                f"**config) returning a transformers.Trainer, got "
                f"{type(trainer_init_per_worker).__name__}.")
        if trainer_init_config is not None and not isinstance(trainer_init_config, dict):
            raise ConfigError("trainer_init_config must be a dict (passed as **config to "
                              "trainer_init_per_worker).")
        require("transformers")
        datasets = dict(datasets or {})
        self._eval_name = _eval_dataset_name(datasets)
        self._torch_datasets = {k: v for k, v in datasets.items() if _is_torch_dataset(v)}
        if preprocessor is not None and "train" in self._torch_datasets:
            raise ConfigError(
                "preprocessor= is fitted on and applied to Ray Data / pandas / file datasets; "
                "datasets['train'] is a torch Dataset: preprocess it yourself, or pass a "
                "ray.data.Dataset or DataFrame.")
        dataset_config = dataset_config or DataConfig(datasets_to_split=["train"])
        if (self._eval_name and self._eval_name not in self._torch_datasets
                and dataset_config.should_split(self._eval_name)):
            raise ConfigError(
                f"DataConfig splits datasets[{self._eval_name!r}], but the Trainer shards the "
                "evaluation set itself and gathers the predictions of every rank: leave it "
                "out of datasets_to_split (the default for TransformersTrainer is "
                "['train']).")
        from engine._internal.execution.pickling import check_picklable

        check_picklable(trainer_init_per_worker, "trainer_init_per_worker")
        self.trainer_init_per_worker = trainer_init_per_worker
        super().__init__(
            functools.partial(_transformers_loop, _LoopSetup(trainer_init_per_worker)),
            train_loop_config=trainer_init_config,
            torch_config=HuggingFaceTorchConfig.from_torch_config(torch_config),
            scaling_config=scaling_config, run_config=run_config,
            datasets={k: v for k, v in datasets.items() if k not in self._torch_datasets},
            dataset_config=dataset_config, resume_from_checkpoint=resume_from_checkpoint,
            metadata=metadata, preprocessor=preprocessor)

    # The Ray AIR name of the config; Tuner param_space may set either.
    @property
    def trainer_init_config(self) -> Optional[Dict[str, Any]]:
        return self.train_loop_config

    @trainer_init_config.setter
    def trainer_init_config(self, value: Optional[Dict[str, Any]]) -> None:
        self.train_loop_config = value

    def _run_spec(self):
        spec = super()._run_spec()
        world = self.scaling_config.num_workers
        split = frozenset(name for name in spec.datasets
                          if self.dataset_config.should_split(name) and world > 1)
        setup = _LoopSetup(self.trainer_init_per_worker, dict(self._torch_datasets), split,
                           self._eval_name)
        spec.train_func = functools.partial(_transformers_loop, setup)
        env = forwarded_env()
        env["ACCELERATE_USE_CPU"] = "false" if self.scaling_config.use_gpu else "true"
        spec.backend_config = HuggingFaceTorchConfig.from_torch_config(
            self.backend_config, worker_env=env)
        return spec


HuggingFaceTrainer = TransformersTrainer


# --- driver-side checks -------------------------------------------------------------
def _eval_dataset_name(datasets: Dict[str, Any]) -> Optional[str]:
    for name in datasets:
        if not isinstance(name, str):
            raise ConfigError(f"datasets keys are names (str), got {name!r}.")
    given = [k for k in EVAL_DATASET_KEYS if k in datasets]
    if len(given) > 1:
        raise ConfigError(
            "datasets has both 'evaluation' and 'validation': pass the evaluation set once "
            "(either name), it becomes the Trainer's eval_dataset.")
    return given[0] if given else None


def _is_torch_dataset(data: Any) -> bool:
    return isinstance(data, (Dataset, IterableDataset))


# --- worker side ----------------------------------------------------------------------
@dataclass
class _LoopSetup:
    trainer_init_per_worker: Callable[..., Any]
    torch_datasets: Dict[str, Any] = field(default_factory=dict)
    split: FrozenSet[str] = frozenset()
    eval_name: Optional[str] = None

    def dataset(self, name: Optional[str]) -> Any:
        """The dataset a worker hands to ``trainer_init_per_worker`` (None if absent)."""
        if name is None:
            return None
        if name in self.torch_datasets:
            return self.torch_datasets[name]
        import engine

        try:
            iterator = engine.get_dataset_shard(name)
        except KeyError:  # not passed
            return None
        return ShardDataset.from_iterator(iterator)


def _transformers_loop(setup: _LoopSetup, config: Optional[Dict[str, Any]]) -> None:
    import engine

    context = engine.get_context()
    with scratch_cwd(context.get_experiment_name()):
        trainer = setup.trainer_init_per_worker(
            setup.dataset("train"), setup.dataset(setup.eval_name), **(config or {}))
        _check_trainer(trainer, context.get_world_size())
        save = trainer.args.save_strategy
        if context.get_world_rank() == 0 and getattr(save, "value", save) == "no":
            logger.warning("TrainingArguments(save_strategy='no'): the Trainer saves no "
                           "checkpoint, so a retried or re-run fit() starts from scratch.")
        if "train" in setup.split:
            _train_on_local_shard(trainer)
        callback = _report_callback(trainer)
        checkpoint = engine.get_checkpoint()
        if checkpoint is None:
            trainer.train()
        else:
            with checkpoint.as_directory() as path:
                _check_resumable(path, checkpoint)
                trainer.train(resume_from_checkpoint=path)
        callback.flush()


def _check_trainer(trainer: Any, world_size: int) -> None:
    import transformers

    if not isinstance(trainer, transformers.Trainer):
        raise TypeError(
            "trainer_init_per_worker must return a transformers.Trainer (or a subclass), "
            f"got {type(trainer).__name__}.")
    if trainer.args.world_size != world_size:
        raise RuntimeError(
            f"The Trainer sees a world of {trainer.args.world_size} process(es) but "
            f"trainyard started {world_size} workers: its TrainingArguments were set up "
            "without the engine's process group (e.g. created before training started, or "
            "with accelerator_config use_configured_state). Build TrainingArguments inside "
            "trainer_init_per_worker.")


def _report_callback(trainer: Any) -> Any:
    from engine.huggingface.callback import TrainReportCallback

    for cb in trainer.callback_handler.callbacks:
        if isinstance(cb, TrainReportCallback):
            return cb
    callback = TrainReportCallback()
    trainer.add_callback(callback)
    return callback


def _train_on_local_shard(trainer: Any) -> None:
    """The engine already gave this rank its part of the training set: keep the
    Trainer's data loader (seeded shuffling, resume skipping, device placement) but stop
    Accelerate from splitting the shard again across the ranks."""
    make_loader = trainer.get_train_dataloader

    @functools.wraps(make_loader)
    def get_train_dataloader() -> Any:
        from accelerate.data_loader import BatchSamplerShard, DataLoaderDispatcher

        loader = make_loader()
        if isinstance(loader, DataLoaderDispatcher):
            raise ConfigError(
                "accelerator_config dispatch_batches=True reads every batch on rank 0, but "
                "trainyard split datasets['train'] across the workers: drop "
                "dispatch_batches, or pass the training set as a torch Dataset.")
        sampler = getattr(loader, "batch_sampler", None)
        if isinstance(sampler, BatchSamplerShard):
            sampler.num_processes, sampler.process_index = 1, 0
        return loader

    trainer.get_train_dataloader = get_train_dataloader


def _check_resumable(path: str, checkpoint: Checkpoint) -> None:
    if not os.path.isfile(os.path.join(path, TRAINER_STATE_FILE)):
        raise CheckpointError(
            f"Checkpoint {checkpoint.uri!r} was not saved by a transformers.Trainer (it has "
            f"no {TRAINER_STATE_FILE}), so the Trainer cannot resume from it. To start "
            "from saved weights instead, load them in trainer_init_per_worker (e.g. "
            "AutoModel.from_pretrained) and drop resume_from_checkpoint.")


class ShardDataset(Dataset):
    """This worker's rows of a ``datasets=`` entry, held in memory as a map-style torch
    dataset of row dicts (list columns as lists, numbers as Python numbers)."""

    def __init__(self, rows: list) -> None:
        self.rows = rows

    @classmethod
    def from_iterator(cls, iterator: Any) -> "ShardDataset":
        return cls([{k: _python_value(v) for k, v in row.items()}
                    for row in iterator.iter_rows()])

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> Dict[str, Any]:
        return self.rows[index]


def _python_value(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return value.tolist()
    return value


__all__ = ["TransformersTrainer", "HuggingFaceTrainer", "ShardDataset"]
