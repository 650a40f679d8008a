"""A worker SIGKILLed at a precise point — in the forward pass, inside ``report()``, in
the middle of uploading a checkpoint's files — is recovered under FailureConfig, and the
run ends with exactly the model of a run without the fault: no round lost or counted
twice, no half-written checkpoint visible, no staging left behind.

The fault is real (the worker process SIGKILLs itself); only *where* it strikes is set
up by the train function, which patches the point in its own process."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest

import engine
from engine import Checkpoint, FailureConfig, RunConfig, ScalingConfig, constants
from engine.torch import TorchTrainer

EPOCHS = 5
FAULT_EPOCH = 2


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def train_func(config):
    import torch

    from engine._internal.worker_group import session as session_mod
    from engine._internal.storage import filesystem as storage_mod
    from engine.torch import prepare_model

    torch.manual_seed(0)
    rank = engine.get_context().get_world_rank()
    model = prepare_model(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    ckpt = engine.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["epoch"] + 1
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, 8, generator=g)
    y = x.sum(1, keepdim=True)
    fault, marker = config.get("fault"), config.get("marker")
    armed = fault is not None and rank == 1 and not os.path.exists(marker)
    for epoch in range(start, EPOCHS):
        fire = armed and epoch == FAULT_EPOCH
        if fire:
            open(marker, "w").close()  # once: the restarted group trains through
        if fire and fault == "forward":
            model.register_forward_pre_hook(lambda *args: _die())
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with tempfile.TemporaryDirectory() as d:
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                        "epoch": epoch}, os.path.join(d, "state.pt"))
            with open(os.path.join(d, "padding.bin"), "wb") as f:
                f.write(os.urandom(1 << 20))
            if fire and fault == "upload":
                copy = storage_mod._copy_local_file_durable
                copied = []

                def copy_then_die(src, dst):
                    if copied:  # one file is in staging, the next never arrives
                        _die()
                    copy(src, dst)
                    copied.append(dst)

                storage_mod._copy_local_file_durable = copy_then_die
            if fire and fault == "report":
                # Inside report(): metrics validated and the checkpoint staged, the
                # report not yet handed to the driver.
                session_mod._session.queue.put = lambda item: _die()
            engine.report({"loss": loss.item(), "epoch": epoch},
                          checkpoint=Checkpoint.from_directory(d))


def _fit(storage_path, fault=None, marker=None):
    return TorchTrainer(
        train_func, train_loop_config={"fault": fault, "marker": marker},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage_path, name="run", verbose=0,
                             failure_config=FailureConfig(max_failures=2)),
    ).fit()


def _weights(result):
    import torch

    with result.checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
    return state["model"], state["epoch"]


@pytest.fixture(scope="module")
def fault_free(ray_session, tmp_path_factory):
    return _fit(str(tmp_path_factory.mktemp("fault_free")))


@pytest.mark.parametrize("fault", ["forward", "report", "upload"])
def test_sigkill_at_a_precise_point_is_recovered_exactly(fault_free, storage_path, tmp_path,
                                                         fault):
    import torch

    marker = str(tmp_path / "fired")
    result = _fit(storage_path, fault, marker)
    assert os.path.exists(marker), "the fault never fired"
    assert result.num_failures == 1
    # The same model as without the fault, bit for bit.
    ours, epoch = _weights(result)
    reference, _ = _weights(fault_free)
    assert epoch == EPOCHS - 1
    for key in reference:
        assert torch.equal(ours[key], reference[key]), key
    # Every round counted once.
    assert list(result.metrics_dataframe["training_iteration"]) == list(range(1, EPOCHS + 1))
    assert list(result.metrics_dataframe["epoch"]) == list(range(EPOCHS))
    # Nothing half-written is visible or left behind.
    run_dir = result.path
    for name in os.listdir(run_dir):
        if name.startswith("checkpoint_"):
            assert os.path.exists(os.path.join(run_dir, name, constants.COMMIT_MARKER)), name
    staging = os.path.join(run_dir, constants.STAGING_DIR)
    assert not os.path.exists(staging) or not os.listdir(staging)
