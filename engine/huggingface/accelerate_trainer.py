"""AccelerateTrainer: a training function that uses ``accelerate.Accelerator`` runs
distributed across the workers, configured by an Accelerate config."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from engine.checkpoint import Checkpoint
from engine.config import DataConfig, RunConfig, ScalingConfig
from engine.huggingface._accelerate_env import (AccelerateConfigInput, load_config,
                                                worker_settings)
from engine.huggingface._backend import HuggingFaceTorchConfig, forwarded_env
from engine.huggingface.transformers_trainer import require
from engine.torch.config import TorchConfig
from engine.torch.trainer import TorchTrainer


class AccelerateTrainer(TorchTrainer):
    """Runs ``train_loop_per_worker`` with ``accelerate.Accelerator()`` set up across the
    workers, as ``accelerate launch`` would set it up across its processes.

    The Accelerate config (mixed precision, FSDP, DeepSpeed, dynamo, gradient
    accumulation …) is read on the driver and turned into the environment Accelerate
    reads, through Accelerate's own launcher code; each worker gets it before the
    training function starts. trainyard decides the topology and networking: the number
    of processes is ``ScalingConfig.num_workers``, ranks, master address and port come
    from the engine's torch process group (which Accelerate joins, not re-creates), and
    the device from ``use_gpu`` (``num_processes``, ``num_machines``, ``machine_rank``,
    ``main_process_ip/port`` and ``gpu_ids`` of the config are ignored). On CPU workers
    an FSDP config shards with FSDP over gloo; DeepSpeed needs ``use_gpu=True``.

    Report metrics and checkpoints with ``engine.report`` as in any trainer.

    Args:
        train_loop_per_worker: ``f(config)`` or ``f()``, which creates the ``Accelerator``.
        train_loop_config: Its ``config``.
        accelerate_config: A dict of ``accelerate config`` settings, the path of a file
            ``accelerate config`` wrote (YAML or JSON, read on the driver), or None for
            Accelerate's default config file when there is one (else defaults: plain DDP,
            no mixed precision). A DeepSpeed JSON file it names is read on the driver too.
        torch_config, scaling_config, run_config, datasets, dataset_config,
        resume_from_checkpoint, metadata, preprocessor: As for
        :class:`engine.torch.TorchTrainer`.

    Raises:
        ConfigError: the Accelerate config is unreadable or not valid for Accelerate.
        ImportError: accelerate is not installed.
    """

    def __init__(self, train_loop_per_worker: Callable[..., Any], *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 accelerate_config: AccelerateConfigInput = None,
                 torch_config: Optional[TorchConfig] = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 preprocessor: Optional[Any] = None) -> None:
        require("accelerate")
        super().__init__(
            train_loop_per_worker, train_loop_config=train_loop_config,
            torch_config=HuggingFaceTorchConfig.from_torch_config(torch_config),
            scaling_config=scaling_config, run_config=run_config, datasets=datasets,
            dataset_config=dataset_config, resume_from_checkpoint=resume_from_checkpoint,
            metadata=metadata, preprocessor=preprocessor)
        self.accelerate_config = accelerate_config
        self._backend_for(self.scaling_config)  # a bad config fails here, not on the workers

    def _backend_for(self, scaling: ScalingConfig) -> HuggingFaceTorchConfig:
        env, files, fsdp_on_cpu = worker_settings(load_config(self.accelerate_config),
                                                  scaling.num_workers, scaling.use_gpu)
        env.update(forwarded_env())
        return HuggingFaceTorchConfig.from_torch_config(
            self.backend_config, worker_env=env, files=files, fsdp_on_cpu=fsdp_on_cpu)

    def _run_spec(self):
        spec = super()._run_spec()
        spec.backend_config = self._backend_for(self.scaling_config)
        return spec


__all__ = ["AccelerateTrainer"]
