"""An Accelerate config (``accelerate config`` file, dict, or the default file) turned into
the environment ``accelerate.Accelerator()`` reads, with trainyard owning the topology.

The settings go through Accelerate's own launcher code (``accelerate launch`` builds
the same variables for the processes it starts), so mixed precision, FSDP, DeepSpeed,
dynamo … mean what they mean there. The topology and networking are the engine's: the
number of processes is ``ScalingConfig.num_workers``, ranks, master address and port
come from the engine's process group, the device from ``use_gpu``.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any, Dict, Tuple, Union

from engine.exceptions import ConfigError

logger = logging.getLogger("engine")

# What `accelerate launch` sets that describes the training (kept) — everything else it
# sets (MASTER_ADDR/PORT, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, KMP_*, PYTHONPATH) is
# topology, placement or the launcher's own process, which the engine decides.
_KEPT_PREFIXES = ("ACCELERATE_", "FSDP_", "MEGATRON_LM_", "PARALLELISM_CONFIG_")
_ENGINE_OWNED = ("ACCELERATE_USE_CPU",)
# Config keys about topology and networking: replaced by the engine's values.
_TOPOLOGY_KEYS = ("num_processes", "num_machines", "machine_rank", "main_process_ip",
                  "main_process_port", "gpu_ids", "same_network", "rdzv_backend",
                  "mpirun_config")
DEEPSPEED_CONFIG_FILE_VAR = "ACCELERATE_DEEPSPEED_CONFIG_FILE"

AccelerateConfigInput = Union[None, str, "os.PathLike[str]", Dict[str, Any]]


def load_config(accelerate_config: AccelerateConfigInput) -> Dict[str, Any]:
    """The config as a dict: a dict as given, a YAML/JSON file read here (on the driver:
    workers need not have it), or with None Accelerate's default config file when it
    exists (``accelerate config`` writes it), else an empty config."""
    if accelerate_config is None:
        from accelerate.commands.config import default_config_file

        if not os.path.isfile(default_config_file):
            return {}
        accelerate_config = default_config_file
    if isinstance(accelerate_config, dict):
        return json.loads(json.dumps(accelerate_config, default=str))  # a deep copy
    if isinstance(accelerate_config, (str, os.PathLike)):
        path = os.path.expanduser(os.fspath(accelerate_config))
        if not os.path.isfile(path):
            raise ConfigError(
                f"accelerate_config={path!r}: no such file. Pass the file `accelerate "
                "config` wrote (default ~/.cache/huggingface/accelerate/default_config.yaml), "
                "a dict of its settings, or None.")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            if path.endswith(".json"):
                data = json.loads(text)
            else:
                import yaml

                data = yaml.safe_load(text)
        except Exception as exc:
            raise ConfigError(f"accelerate_config={path!r} could not be parsed: {exc}") from exc
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ConfigError(f"accelerate_config={path!r} must hold a mapping of settings, "
                              f"got {type(data).__name__}.")
        return data
    raise ConfigError(
        f"accelerate_config must be None, a path to an Accelerate config file or a dict, "
        f"got {type(accelerate_config).__name__}.")


def worker_settings(config: Dict[str, Any], num_workers: int, use_gpu: bool
                    ) -> Tuple[Dict[str, str], Dict[str, str], bool]:
    """``(env, files, fsdp_on_cpu)`` for :class:`HuggingFaceTorchConfig`.

    Raises:
        ConfigError: the config is not one Accelerate accepts, or asks for what trainyard
            does not run (SageMaker, TPU).
    """
    cfg = dict(config)
    cfg.setdefault("compute_environment", "LOCAL_MACHINE")
    cfg.setdefault("distributed_type", "NO")
    env_kind = str(cfg["compute_environment"]).upper()
    if env_kind != "LOCAL_MACHINE":
        raise ConfigError(
            f"accelerate_config has compute_environment={cfg['compute_environment']!r}: "
            "trainyard runs Accelerate on its own workers; use LOCAL_MACHINE.")
    if str(cfg["distributed_type"]).upper() in ("XLA", "TPU"):
        raise ConfigError("accelerate_config selects TPUs (distributed_type XLA), which "
                          "trainyard does not run: use NO, MULTI_GPU, MULTI_CPU, FSDP or "
                          "DEEPSPEED.")
    _log_overrides(cfg, num_workers, use_gpu)
    files = _shipped_files(cfg)
    for key in _TOPOLOGY_KEYS:
        cfg.pop(key, None)
    cfg["use_cpu"] = not use_gpu
    env = _launcher_env(cfg, num_workers)
    env = {k: v for k, v in env.items()
           if k.startswith(_KEPT_PREFIXES) and k not in _ENGINE_OWNED}
    env["ACCELERATE_USE_CPU"] = "false" if use_gpu else "true"
    if not use_gpu and env.get("ACCELERATE_USE_DEEPSPEED") == "true":
        logger.warning(
            "accelerate_config selects DeepSpeed but ScalingConfig(use_gpu=False): "
            "Accelerate runs DeepSpeed on GPUs only, so the workers train with plain DDP "
            "on CPU. Set use_gpu=True to use DeepSpeed.")
    fsdp_on_cpu = not use_gpu and env.get("ACCELERATE_USE_FSDP") == "true"
    if fsdp_on_cpu and env.get("FSDP_VERSION", "1") != "2":
        raise ConfigError(
            "accelerate_config selects FSDP version 1, which Accelerate runs on GPUs only "
            "(it needs a device for sync_module_states and an index-free compute device). "
            "On CPU workers set fsdp_config: {fsdp_version: 2} (PyTorch's fully_shard, "
            "which trainyard runs over gloo), or use ScalingConfig(use_gpu=True).")
    return env, files, fsdp_on_cpu


def _log_overrides(cfg: Dict[str, Any], num_workers: int, use_gpu: bool) -> None:
    ignored = [f"{k}={cfg[k]!r}" for k in _TOPOLOGY_KEYS if cfg.get(k) not in (None, {}, [])]
    if cfg.get("use_cpu") and use_gpu:
        ignored.append("use_cpu=True")
    if ignored:
        logger.info(
            "accelerate_config sets %s: trainyard decides the topology instead (%d workers "
            "from ScalingConfig, ranks and rendezvous from its process group, %s).",
            ", ".join(ignored), num_workers, "GPUs" if use_gpu else "CPUs")


def _shipped_files(cfg: Dict[str, Any]) -> Dict[str, str]:
    """A DeepSpeed JSON config named by path is read here and written on each worker."""
    ds = cfg.get("deepspeed_config") or {}
    path = ds.get("deepspeed_config_file") if isinstance(ds, dict) else None
    if not path or str(path).lower() == "none":
        return {}
    path = os.path.expanduser(str(path))
    if not os.path.isfile(path):
        raise ConfigError(
            f"accelerate_config deepspeed_config.deepspeed_config_file={path!r}: no such "
            "file on the driver (trainyard reads it here and gives each worker a copy).")
    with open(path, encoding="utf-8") as f:
        return {DEEPSPEED_CONFIG_FILE_VAR: f.read()}


def _launcher_env(cfg: Dict[str, Any], num_workers: int) -> Dict[str, str]:
    """The environment `accelerate launch --config_file <cfg>` would give its processes."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import launch as launch_utils

    with tempfile.TemporaryDirectory(prefix="trainyard_accelerate_") as tmp:
        path = os.path.join(tmp, "accelerate_config.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cfg, f)
        argv = ["--config_file", path, "--num_processes", str(num_workers),
                "--num_machines", "1", "--machine_rank", "0", "--gpu_ids", "all",
                "--main_process_ip", "127.0.0.1", "--main_process_port", "0",
                "--num_cpu_threads_per_process", "1", "train_func.py"]
        try:
            args = launch_command_parser().parse_args(argv)
            args, defaults, mp_from_config = _validate_launch_command(args)
            if args.use_deepspeed:
                fields = list(defaults.deepspeed_config.keys()) if defaults else []
                if mp_from_config:
                    fields.append("mixed_precision")
                args.deepspeed_fields_from_accelerate_config = ",".join(fields)
                _, env = launch_utils.prepare_deepspeed_cmd_env(args)
            elif args.use_fsdp or args.use_megatron_lm or args.multi_gpu:
                env = launch_utils.prepare_multi_gpu_env(args)
            else:
                _, env = launch_utils.prepare_simple_launcher_cmd_env(args)
        except (ValueError, TypeError, KeyError, AssertionError) as exc:
            raise ConfigError(f"accelerate_config is not valid for Accelerate: {exc}") from exc
        except SystemExit as exc:  # argparse rejected a value taken from the config
            raise ConfigError(f"accelerate_config is not valid for Accelerate (exit {exc.code}); "
                              "check its values against `accelerate launch --help`.") from exc
    return dict(env)


def enable_fsdp_on_cpu() -> None:
    """Let ``accelerate.Accelerator()`` shard with FSDP on a CPU worker.

    Accelerate selects FSDP only for accelerator devices: on CPU its state is MULTI_CPU,
    which it wraps in DDP and ignores the FSDP settings. PyTorch's FSDP itself runs on CPU
    over gloo. So the process state is set up here on the CPU (joining the engine's
    process group) and presented as a multi-device one, which ``Accelerator()`` turns
    into FSDP with the CPU as its device.
    """
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    AcceleratorState._reset_state(reset_partial_state=True)
    state = PartialState(cpu=True)
    if state.distributed_type != DistributedType.MULTI_CPU or \
            not hasattr(PartialState, "_shared_state"):
        raise RuntimeError(
            f"Accelerate set up {state.distributed_type} instead of MULTI_CPU on a CPU "
            "worker, so FSDP on CPU cannot be enabled; use ScalingConfig(use_gpu=True) or "
            "a config without FSDP.")
    PartialState._shared_state["distributed_type"] = DistributedType.MULTI_GPU
