"""HorovodTrainer with real Horovod (Gloo) on 2 Ray workers: rendezvous and ranks,
a digits MLP trained with hvd.DistributedOptimizer, and recovery from a SIGKILLed worker.

Horovod 0.28.1 is installed by ``make test`` (scripts/install_horovod.sh); without it
these tests skip, naming that command, except the one that checks the ImportError.
"""

from __future__ import annotations

import sys
import threading

import pytest

import engine
from engine import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from engine.callbacks import Callback
from engine.horovod import HorovodConfig, HorovodTrainer
from engine.horovod.config import INSTALL_COMMAND, horovod_installed, plan_slots
from pipelines import digits
from tests.support.fakes import KillWorkerOnce

# The module's fits check what training produced: they run on warm pooled workers
# (tests/README.md, "How a new test pays for itself"); the fault tests ask for
# fresh_workers.
pytestmark = pytest.mark.usefixtures("pooled_workers")


needs_horovod = pytest.mark.skipif(
    not horovod_installed(),
    reason=f"horovod is not installed: run `{INSTALL_COMMAND}` (make test does it)")


class AllRanks(Callback):
    def __init__(self) -> None:
        self.rounds = []

    def on_report(self, metrics, all_metrics):
        self.rounds.append(all_metrics)


# --- train functions (run on the workers) ----------------------------------------------
def allreduce_ranks():
    """No arguments and the plain Horovod API, as a function for Horovod's own Ray
    executor is written; it reports what Horovod says about this rank."""
    import horovod.torch as hvd
    import torch

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum)
    gathered = hvd.allgather_object(hvd.rank())
    engine.report({"sum": total.item(), "gathered": gathered, "rank": hvd.rank(),
                   "size": hvd.size(), "local_rank": hvd.local_rank(),
                   "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
                   "cross_size": hvd.cross_size(), "gloo": hvd.gloo_enabled(),
                   "mpi": hvd.mpi_enabled(),
                   "engine_rank": engine.get_context().get_world_rank()})
    hvd.shutdown()


def hvd_digits(config):
    """The digits MLP under Horovod: this rank's slice of the data, broadcast weights,
    DistributedOptimizer, a rank-0 checkpoint each epoch, resume from get_checkpoint()."""
    import time

    import horovod.torch as hvd
    import torch

    hvd.init()
    torch.manual_seed(config.get("seed", 0))
    X_train, y_train, X_val, y_val = digits.load_digits_split()
    X, y = torch.from_numpy(X_train), torch.from_numpy(y_train)
    Xv, yv = torch.from_numpy(X_val), torch.from_numpy(y_val)
    model = digits.build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"] * hvd.size())
    start = 0
    ckpt = engine.get_checkpoint()
    if ckpt is not None:
        state = ckpt.to_dict()
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    bs = config["batch_size"]
    for epoch in range(start, config["epochs"]):
        g = torch.Generator().manual_seed(epoch)
        order = torch.randperm(len(X), generator=g)[hvd.rank()::hvd.size()]
        # Every rank takes the same number of steps (allreduce pairs them up).
        steps = len(X) // hvd.size() // bs
        model.train()
        for step in range(steps):
            idx = order[step * bs:(step + 1) * bs]
            optimizer.zero_grad()
            loss = loss_fn(model(X[idx]), y[idx])
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            acc = (model(Xv).argmax(1) == yv).float().mean().item()
        state = {"epoch": epoch, "model": model.state_dict(),
                 "optimizer": optimizer.state_dict()}
        engine.report({"epoch": epoch, "accuracy": acc, "loss": loss.item(),
                       "weights_checksum": digits.weights_checksum(model),
                       "start_epoch": start},
                      checkpoint=Checkpoint.from_dict(state) if hvd.rank() == 0 else None)
        if config.get("epoch_delay_s"):
            time.sleep(config["epoch_delay_s"])


DIGITS = {"epochs": 6, "lr": 2e-3, "batch_size": 32}


def _rendezvous_threads():
    return [t for t in threading.enumerate() if t.name == "trainyard-horovod-rendezvous"]


# --- tests -----------------------------------------------------------------------------
@needs_horovod
def test_allreduce_of_ranks_and_topology(ray_start_4_cpus, storage_path):
    ranks = AllRanks()
    result = HorovodTrainer(
        allreduce_ranks, scaling_config=ScalingConfig(num_workers=2),
        horovod_config=HorovodConfig(timeout_s=60),
        run_config=RunConfig(storage_path=storage_path, callbacks=[ranks]),
    ).fit()
    assert result.error is None
    (round_,) = ranks.rounds
    for rank, m in enumerate(round_):
        assert m["sum"] == 0 + 1
        assert m["gathered"] == [0, 1]
        assert (m["rank"], m["engine_rank"], m["size"]) == (rank, rank, 2)
        # One node: both workers are local to each other, each alone across nodes.
        assert (m["local_rank"], m["local_size"]) == (rank, 2)
        assert (m["cross_rank"], m["cross_size"]) == (0, 1)
        assert m["gloo"] and not m["mpi"]
    assert not _rendezvous_threads()  # the driver's server stopped with the run


@needs_horovod
def test_digits_mlp_distributed_optimizer(ray_start_4_cpus, storage_path):
    ranks = AllRanks()
    result = HorovodTrainer(
        hvd_digits, train_loop_config=DIGITS, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage_path, callbacks=[ranks]),
    ).fit()
    assert result.metrics["accuracy"] >= 0.90
    assert result.metrics["epoch"] == DIGITS["epochs"] - 1
    for round_ in ranks.rounds:  # the optimizer kept both ranks' weights identical
        assert round_[0]["weights_checksum"] == round_[1]["weights_checksum"]
    model = digits.build_model()
    model.load_state_dict(result.checkpoint.to_dict()["model"])
    assert digits.weights_checksum(model) == result.metrics["weights_checksum"]


@needs_horovod
def test_worker_sigkill_is_recovered_from_checkpoint(fresh_workers, storage_path):
    killer = KillWorkerOnce(rank=1, at_iteration=2)
    config = dict(DIGITS, epoch_delay_s=1.0)
    result = HorovodTrainer(
        hvd_digits, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage_path, callbacks=[killer],
                             failure_config=FailureConfig(max_failures=1)),
    ).fit()
    assert killer.killed_pid is not None and killer.retries == 1
    assert result.metrics["epoch"] == config["epochs"] - 1
    assert result.metrics["accuracy"] >= 0.90
    # The second attempt started from a committed checkpoint, not from scratch, on a
    # fresh Horovod rendezvous (the killed process is gone, hvd.init() worked again).
    assert result.metrics["start_epoch"] >= 2
    epochs = list(result.metrics_dataframe["epoch"])
    assert epochs == list(range(config["epochs"]))
    assert not _rendezvous_threads()


def test_missing_horovod_raises_import_error_with_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "horovod", None)  # as if not installed
    with pytest.raises(ImportError) as info:
        HorovodTrainer(allreduce_ranks, scaling_config=ScalingConfig(num_workers=2))
    assert INSTALL_COMMAND in str(info.value)
    assert INSTALL_COMMAND == "bash scripts/install_horovod.sh .venv/bin/python"


def test_slots_follow_horovods_topology_across_nodes():
    slots = plan_slots(["n1", "n1", "n2", "n2", "n3"])
    assert [(s.rank, s.local_rank, s.local_size) for s in slots] == [
        (0, 0, 2), (1, 1, 2), (2, 0, 2), (3, 1, 2), (4, 0, 1)]
    # cross_rank: the node's index among the nodes that have this local rank.
    assert [(s.cross_rank, s.cross_size) for s in slots] == [
        (0, 3), (0, 2), (1, 3), (1, 2), (2, 3)]
    assert {s.size for s in slots} == {5}


def test_horovod_config_rejects_bad_values():
    with pytest.raises(ValueError, match="nics"):
        HorovodConfig(nics="eth0")
    with pytest.raises(ValueError, match="timeout_s"):
        HorovodConfig(timeout_s=0)
    assert HorovodConfig(nics={"eth1", "eth0"}).nics == ["eth0", "eth1"]


def test_importing_engine_horovod_imports_neither_horovod_nor_torch():
    import subprocess

    code = ("import sys, engine.horovod; "
            "print(sorted(m for m in ('horovod', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
