"""AccelerateTrainer on 2 real workers: the digits MLP written with ``Accelerator.prepare``
(DDP from a config file whose topology the engine overrides), FSDP on CPU over gloo, and
a DeepSpeed config passed through to the workers (trained on a GPU machine)."""

from __future__ import annotations

import json
import os
import tempfile

import pytest

pytest.importorskip("accelerate")

import engine
from engine import Checkpoint, RunConfig, ScalingConfig
from engine.exceptions import ConfigError
from engine.huggingface import AccelerateTrainer
from pipelines import digits

# The module's fits check what training produced, not how workers start: they run on
# warm pooled workers (tests/README.md, "How a new test pays for itself").
pytestmark = pytest.mark.usefixtures("pooled_workers")



def accelerate_digits(config):
    """The user's loop: plain PyTorch made distributed by ``Accelerator.prepare``."""
    import torch
    import torch.nn.functional as F
    from accelerate import Accelerator
    from torch.utils.data import DataLoader, TensorDataset

    accelerator = Accelerator()
    X_train, y_train, X_val, y_val = digits.load_digits_split()
    loader = DataLoader(TensorDataset(torch.from_numpy(X_train), torch.from_numpy(y_train)),
                        batch_size=32, shuffle=True)
    torch.manual_seed(0)
    model = digits.build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    X_val = torch.from_numpy(X_val).to(accelerator.device)
    y_val = torch.from_numpy(y_val).to(accelerator.device)
    for epoch in range(config["epochs"]):
        model.train()
        rows = 0
        for x, y in loader:
            optimizer.zero_grad()
            accelerator.backward(F.cross_entropy(model(x), y))
            optimizer.step()
            rows += len(y)
        model.eval()
        with torch.no_grad():
            accuracy = (model(X_val).argmax(1) == y_val).float().mean().item()
        state = accelerator.get_state_dict(model)  # gathers FSDP shards on rank 0
        checkpoint = None
        if accelerator.is_main_process:
            folder = tempfile.mkdtemp()
            torch.save({k: v.cpu() for k, v in state.items()}, os.path.join(folder, "model.pt"))
            checkpoint = Checkpoint.from_directory(folder)
        engine.report({
            "epoch": epoch, "accuracy": accuracy, "rows": rows,
            "distributed_type": str(accelerator.distributed_type),
            "num_processes": accelerator.num_processes, "device": str(accelerator.device),
            "model_class": type(model).__name__,
            "local_params": sum(_local(p).numel() for p in model.parameters()),
        }, checkpoint=checkpoint)


def _local(param):
    return param.to_local() if hasattr(param, "to_local") else param


def _evaluate(checkpoint) -> float:
    import torch

    model = digits.build_model()
    with checkpoint.as_directory() as folder:
        model.load_state_dict(torch.load(os.path.join(folder, "model.pt"), weights_only=True))
    _, _, X_val, y_val = digits.load_digits_split()
    with torch.no_grad():
        pred = model(torch.from_numpy(X_val)).argmax(1).numpy()
    return float((pred == y_val).mean())


def _last_round(result):
    """Every rank's metrics of the last report, in rank order (a DataFrame)."""
    df = result.worker_metrics_dataframe
    return df[df["training_iteration"] == df["training_iteration"].max()].sort_values("rank")


N_PARAMS = sum(p.numel() for p in digits.build_model().parameters())
N_TRAIN = len(digits.load_digits_split()[0])


def test_digits_mlp_with_accelerator_prepare_trains_on_two_workers(
        ray_start_4_cpus, storage_path, tmp_path):
    # A config file written by `accelerate config` for another machine: its topology
    # (8 processes, rank 3 of 2 machines, someone else's address and GPUs) is replaced.
    config_file = tmp_path / "default_config.yaml"
    config_file.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n"
        "mixed_precision: 'no'\nnum_processes: 8\nnum_machines: 2\nmachine_rank: 1\n"
        "main_process_ip: 10.1.2.3\nmain_process_port: 29999\ngpu_ids: '5'\n")
    result = AccelerateTrainer(
        accelerate_digits, train_loop_config={"epochs": 6},
        accelerate_config=str(config_file), scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage_path)).fit()
    assert result.metrics["accuracy"] >= 0.9
    assert result.metrics["num_processes"] == 2
    assert result.metrics["distributed_type"] == "DistributedType.MULTI_CPU"
    assert result.metrics["model_class"] == "DistributedDataParallel"
    # Accelerate's sampler gave each worker its half of the training set (whole batches).
    assert N_TRAIN / 2 <= result.metrics["rows"] <= N_TRAIN / 2 + 32
    assert result.metrics["epoch"] == 5
    assert _evaluate(result.checkpoint) >= 0.9
    assert len([d for d in os.listdir(result.path) if d.startswith("checkpoint_")]) == 6


def test_fsdp_config_shards_the_model_on_cpu_over_gloo(ray_start_4_cpus, storage_path):
    config = {"distributed_type": "FSDP", "mixed_precision": "no",
              "fsdp_config": {"fsdp_version": 2, "fsdp_auto_wrap_policy": "NO_WRAP",
                              "fsdp_reshard_after_forward": True,
                              "fsdp_state_dict_type": "FULL_STATE_DICT"}}
    result = AccelerateTrainer(
        accelerate_digits, train_loop_config={"epochs": 6}, accelerate_config=config,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage_path)).fit()
    assert result.metrics["distributed_type"] == "DistributedType.FSDP"
    assert result.metrics["device"].startswith("cpu")
    # Each rank holds half of the parameters: the model is sharded, not replicated.
    per_rank = list(_last_round(result)["local_params"])
    assert sum(per_rank) == N_PARAMS and max(per_rank) <= 0.6 * N_PARAMS
    assert result.metrics["accuracy"] >= 0.9
    assert _evaluate(result.checkpoint) >= 0.9  # the full state dict gathered on rank 0


def _report_env():
    keys = ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_ZERO_STAGE",
            "ACCELERATE_USE_CPU", "ACCELERATE_MIXED_PRECISION", "ACCELERATE_CONFIG_DS_FIELDS",
            "HF_HUB_OFFLINE", "RANK", "WORLD_SIZE", "MASTER_PORT")
    env = {k: os.environ.get(k) for k in keys}
    with open(os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"]) as f:
        env["deepspeed_config"] = f.read()
    engine.report(env)


def test_deepspeed_config_reaches_the_workers(ray_start_4_cpus, storage_path, tmp_path,
                                              monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ds_file = tmp_path / "ds_config.json"
    ds_config = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto",
                 "gradient_accumulation_steps": 1}
    ds_file.write_text(json.dumps(ds_config))
    config = {"distributed_type": "DEEPSPEED",
              "deepspeed_config": {"deepspeed_config_file": str(ds_file)}}
    result = AccelerateTrainer(_report_env, accelerate_config=config,
                               scaling_config=ScalingConfig(num_workers=2),
                               run_config=RunConfig(storage_path=storage_path)).fit()
    ranks = [dict(m, deepspeed_config=json.loads(m["deepspeed_config"]))
             for m in _last_round(result).to_dict("records")]
    for rank, env in enumerate(ranks):
        assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
        assert env["deepspeed_config"] == ds_config  # a copy of the driver's file
        assert env["ACCELERATE_USE_CPU"] == "true"
        assert env["HF_HUB_OFFLINE"] == "1"
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), "2")
    assert ranks[0]["MASTER_PORT"] == ranks[1]["MASTER_PORT"]


def test_bad_accelerate_configs_fail_on_the_driver(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        AccelerateTrainer(_report_env, accelerate_config=str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="LOCAL_MACHINE"):
        AccelerateTrainer(_report_env, accelerate_config={
            "compute_environment": "AMAZON_SAGEMAKER", "distributed_type": "NO"})
    with pytest.raises(ConfigError, match="TPU"):
        AccelerateTrainer(_report_env, accelerate_config={"distributed_type": "XLA"})
    with pytest.raises(ConfigError, match="not valid for Accelerate"):
        AccelerateTrainer(_report_env, accelerate_config={"distributed_type": "NO",
                                                          "not_a_setting": 1})
    with pytest.raises(ConfigError, match="deepspeed_config_file"):
        AccelerateTrainer(_report_env, accelerate_config={
            "distributed_type": "DEEPSPEED",
            "deepspeed_config": {"deepspeed_config_file": str(tmp_path / "nope.json")}})
    with pytest.raises(ConfigError, match="must be None, a path"):
        AccelerateTrainer(_report_env, accelerate_config=42)
    with pytest.raises(ConfigError, match="fsdp_version: 2"):
        AccelerateTrainer(_report_env, accelerate_config={
            "distributed_type": "FSDP", "fsdp_config": {"fsdp_version": 1}})


def test_config_becomes_accelerate_env_with_the_engines_topology():
    from engine.huggingface._accelerate_env import worker_settings

    env, files, fsdp_on_cpu = worker_settings(
        {"distributed_type": "MULTI_GPU", "mixed_precision": "bf16", "num_processes": 8,
         "gpu_ids": "3", "main_process_ip": "10.0.0.9", "main_process_port": 1234,
         "dynamo_config": {"dynamo_backend": "INDUCTOR"}}, num_workers=2, use_gpu=False)
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    assert env["ACCELERATE_DYNAMO_BACKEND"] == "INDUCTOR"
    assert env["ACCELERATE_USE_CPU"] == "true"
    # Nothing about processes, addresses, devices or threads: those are the engine's.
    assert not {k for k in env if not k.startswith("ACCELERATE_")}
    assert files == {} and fsdp_on_cpu is False
    env, _, fsdp_on_cpu = worker_settings(
        {"distributed_type": "FSDP", "fsdp_config": {"fsdp_version": 2}}, 2, use_gpu=True)
    assert env["ACCELERATE_USE_FSDP"] == "true" and env["ACCELERATE_USE_CPU"] == "false"
    assert fsdp_on_cpu is False  # on GPUs Accelerate selects FSDP by itself


@pytest.mark.gpu
def test_deepspeed_trains_on_gpu(ray_start_4_cpus, storage_path):
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed on this GPU machine")
    import torch

    config = {"distributed_type": "DEEPSPEED", "mixed_precision": "no",
              "deepspeed_config": {"zero_stage": 2, "gradient_accumulation_steps": 1,
                                   "offload_optimizer_device": "none",
                                   "offload_param_device": "none"}}
    workers = min(2, torch.cuda.device_count())
    result = AccelerateTrainer(
        accelerate_digits, train_loop_config={"epochs": 6}, accelerate_config=config,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=True),
        run_config=RunConfig(storage_path=storage_path)).fit()
    assert result.metrics["distributed_type"] == "DistributedType.DEEPSPEED"
    assert result.metrics["device"].startswith("cuda")
    assert result.metrics["accuracy"] >= 0.9
