"""Real 2-worker DDP on scikit-learn's digits, checkpoints, retention, resume, AMP."""

from __future__ import annotations

import os

import pytest

import engine
from engine import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig, session
from engine.callbacks import Callback
from engine.torch import TorchTrainer
from pipelines import digits

# The module's fits check what training produced, not how workers start: they run on
# warm pooled workers (tests/README.md, "How a new test pays for itself").
pytestmark = pytest.mark.usefixtures("pooled_workers")


class AllRanks(Callback):
    def __init__(self):
        self.rounds = []

    def on_report(self, metrics, all_metrics):
        self.rounds.append(all_metrics)


def _fit_digits(storage_path, **config):
    cb = AllRanks()
    cfg = {"epochs": 8, "lr": 3e-3, "batch_size": 32, "report_seen_ids": True}
    cfg.update(config)
    trainer = TorchTrainer(digits.train_func, train_loop_config=cfg,
                           scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(storage_path=storage_path, callbacks=[cb]))
    return trainer.fit(), cb


def test_ddp_digits_trains_checkpoints_and_shards(ray_start_4_cpus, storage_path):
    result, cb = _fit_digits(storage_path)
    assert result.metrics["accuracy"] >= 0.90
    # A checkpoint every epoch, the latest is the last epoch's and loads into the model.
    assert result.checkpoint is not None
    state = result.checkpoint.to_dict()
    assert state["epoch"] == 7
    model = digits.build_model()
    model.load_state_dict(state["model_weights"])
    assert digits.evaluate_checkpoint(result.checkpoint) >= 0.90
    assert sorted(n for n in os.listdir(result.path) if n.startswith("checkpoint_")) == [
        f"checkpoint_{i:06d}" for i in range(8)]
    # Both ranks hold identical weights after every epoch.
    for ranks in cb.rounds:
        assert ranks[0]["weights_checksum"] == ranks[1]["weights_checksum"]
    # Each epoch the ranks saw disjoint halves of the training set; DistributedSampler
    # pads an odd-sized set with one repeated sample so both ranks take equal steps.
    n_train = len(digits.load_digits_split()[0])
    padding = (-n_train) % 2
    for ranks in cb.rounds:
        a, b = ranks[0]["seen_ids"], ranks[1]["seen_ids"]
        assert len(a) == len(b) == (n_train + padding) // 2
        assert len(set(a) & set(b)) == padding
        assert set(a) | set(b) == set(range(n_train))


def test_amp_bfloat16_on_cpu_trains_to_same_band(ray_start_4_cpus, storage_path):
    result, _ = _fit_digits(storage_path, amp=True, report_seen_ids=False)
    assert result.metrics["accuracy"] >= 0.90


def test_enable_reproducibility_gives_identical_weights(ray_start_4_cpus, storage_path):
    r1, _ = _fit_digits(storage_path, seed=7, epochs=3, report_seen_ids=False)
    r2, _ = _fit_digits(storage_path, seed=7, epochs=3, report_seen_ids=False)
    assert r1.path != r2.path
    assert r1.metrics["weights_checksum"] == r2.metrics["weights_checksum"]
    w1 = r1.checkpoint.to_dict()["model_weights"]
    w2 = r2.checkpoint.to_dict()["model_weights"]
    assert all((w1[k] == w2[k]).all() for k in w1)


def _retention_func():
    for loss in (2, 4, 1, 3):
        session.report(dict(loss=loss), checkpoint=Checkpoint.from_dict(dict(loss=loss)))


def test_retention_seed_example(ray_start_4_cpus, storage_path):
    cfg = CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="loss",
                           checkpoint_score_order="min")
    result = TorchTrainer(_retention_func, scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(storage_path=storage_path,
                                               checkpoint_config=cfg)).fit()
    best = result.best_checkpoints
    assert [m["loss"] for _, m in best] == [2, 1]
    assert [c.to_dict()["loss"] for c, _ in best] == [2, 1]
    kind, path = best[0][0].get_internal_representation()
    assert kind == "local_path" and path.endswith("checkpoint_000000")
    assert best[1][0].get_internal_representation()[1].endswith("checkpoint_000002")
    assert result.checkpoint.to_dict() == {"loss": 3}
    on_disk = sorted(n for n in os.listdir(result.path) if n.startswith("checkpoint_"))
    assert on_disk == ["checkpoint_000000", "checkpoint_000002", "checkpoint_000003"]
    assert not os.path.exists(os.path.join(result.path, ".staging"))


def _seed_checkpoint_func(config):
    import numpy as np
    import torch
    import torch.nn as nn
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

    import engine.torch

    X = torch.Tensor(np.random.normal(0, 1, size=(100, 4)))
    Y = torch.Tensor(np.random.uniform(0, 1, size=(100, 1)))
    model = nn.Linear(4, 1)
    start_epoch = 0
    checkpoint = session.get_checkpoint()
    if checkpoint:
        checkpoint_dict = checkpoint.to_dict()
        model.load_state_dict(checkpoint_dict.get("model_weights"))
        start_epoch = checkpoint_dict.get("epoch", -1) + 1
    model = engine.torch.prepare_model(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    for epoch in range(start_epoch, config["num_epochs"]):
        loss = nn.MSELoss()(model.forward(X), Y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state_dict = model.state_dict()
        consume_prefix_in_state_dict_if_present(state_dict, "module.")
        session.report({}, checkpoint=Checkpoint.from_dict(
            dict(epoch=epoch, model_weights=state_dict)))


def test_resume_from_checkpoint_continues_epochs(ray_start_4_cpus, storage_path):
    rc = RunConfig(storage_path=storage_path)
    first = TorchTrainer(_seed_checkpoint_func, train_loop_config={"num_epochs": 2},
                         scaling_config=ScalingConfig(num_workers=2), run_config=rc).fit()
    assert first.checkpoint.to_dict()["epoch"] == 1
    second = TorchTrainer(_seed_checkpoint_func, train_loop_config={"num_epochs": 5},
                          scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(storage_path=storage_path),
                          resume_from_checkpoint=first.checkpoint).fit()
    assert second.checkpoint.to_dict()["epoch"] == 4
    assert len(second.metrics_dataframe) == 3
    assert second.metrics["training_iteration"] == 3
    # The first run's checkpoint is untouched by the continuation.
    assert first.checkpoint.to_dict()["epoch"] == 1


def test_both_ranks_checkpoint_files_merge_rank0_wins(ray_start_4_cpus, storage_path):
    def f():
        import tempfile

        rank = engine.get_context().get_world_rank()
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "shared.txt"), "w") as fh:
            fh.write(f"rank{rank}")
        with open(os.path.join(d, f"shard_{rank}.txt"), "w") as fh:
            fh.write(str(rank))
        engine.report({"r": rank}, checkpoint=Checkpoint.from_directory(d))

    result = TorchTrainer(f, scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(storage_path=storage_path)).fit()
    with result.checkpoint.as_directory() as d:
        names = sorted(n for n in os.listdir(d) if not n.startswith("."))
        assert names == ["model_card.json", "shard_0.txt", "shard_1.txt", "shared.txt"]
        assert open(os.path.join(d, "shared.txt")).read() == "rank0"


@pytest.mark.gpu
def test_gpu_nccl_amp(ray_start_4_cpus, storage_path):
    def f():
        import torch
        import torch.distributed as dist

        from engine.torch import accelerate, backward, get_device, prepare_model, prepare_optimizer

        accelerate(amp=True)
        device = get_device()
        assert device.type == "cuda"
        model = prepare_model(torch.nn.Linear(8, 1))
        opt = prepare_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
        x = torch.randn(32, 8, device=device)
        loss = model(x).pow(2).mean()
        backward(loss)
        opt.step()
        t = torch.ones(1, device=device)
        dist.all_reduce(t)
        engine.report({"sum": t.item(), "backend": dist.get_backend()})

    import torch

    n = max(1, min(2, torch.cuda.device_count()))
    result = TorchTrainer(f, scaling_config=ScalingConfig(num_workers=n, use_gpu=True),
                          run_config=RunConfig(storage_path=storage_path)).fit()
    assert result.metrics["sum"] == n and result.metrics["backend"] == "nccl"
