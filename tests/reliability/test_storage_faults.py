"""Storage that stalls or fills up mid-run.

* The S3-compatible server frozen (SIGSTOP) while workers upload and the driver
  commits, then thawed (SIGCONT): the storage layer retries, the run finishes, and every
  checkpoint is there, committed.
* The disk filling up while a checkpoint is written (a small tmpfs, mounted where the
  test may — as root with mount rights; otherwise the test skips and says why): the run
  fails cleanly, with the previous checkpoint intact and resumable.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

import engine
from engine import (Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig,
                    TrainingFailedError, constants)
from engine.callbacks import Callback
from engine.torch import TorchTrainer


def _paced_checkpoints(config):
    start = 0
    ckpt = engine.get_checkpoint()
    if ckpt:
        start = ckpt.to_dict()["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        time.sleep(config.get("delay", 0.5))
        if config.get("commits_in") and epoch > start:
            # The previous round committed first, however loaded the machine: its commit
            # is asynchronous and a full run at load 20 took longer than the delay.
            marker = os.path.join(config["commits_in"], f"checkpoint_{epoch - 1:06d}",
                                  constants.COMMIT_MARKER)
            deadline = time.monotonic() + 120
            while not os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.05)
        blob = os.urandom(config.get("size", 1024))
        engine.report({"epoch": epoch}, checkpoint=Checkpoint.from_dict(
            {"epoch": epoch, "blob": blob}))


class FreezeServer(Callback):
    """SIGSTOPs a process when a round arrives and SIGCONTs it ``seconds`` later."""

    def __init__(self, pid: int, at_iteration: int, seconds: float) -> None:
        self.pid, self.at_iteration, self.seconds = pid, at_iteration, seconds
        self.thread = None

    def on_report(self, metrics, all_metrics):
        if self.thread is None and metrics["training_iteration"] == self.at_iteration:
            os.kill(self.pid, signal.SIGSTOP)
            self.thread = threading.Timer(self.seconds, os.kill, (self.pid, signal.SIGCONT))
            self.thread.start()


def test_s3_server_frozen_mid_run_loses_no_checkpoint(ray_start_4_cpus, s3_server,
                                                     s3_storage_path):
    # 25 s: longer than the AWS SDK's own retries last (the run failed at 25 s before the
    # storage layer retried), shorter than TRAINYARD_STORAGE_RETRY_S's default 120 s.
    freeze = FreezeServer(s3_server.process.pid, at_iteration=2, seconds=25.0)
    try:
        result = TorchTrainer(
            _paced_checkpoints, train_loop_config={"epochs": 5},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path=s3_storage_path, name="frozen", verbose=0,
                                 callbacks=[freeze]),
        ).fit()
    finally:
        if freeze.thread is not None:
            freeze.thread.join()
        os.kill(s3_server.process.pid, signal.SIGCONT)
    assert freeze.thread is not None, "the server was never frozen"
    assert result.num_failures == 0
    assert result.checkpoint.to_dict()["epoch"] == 4
    prefix = s3_storage_path.split("?")[0][len(f"s3://{s3_server.bucket}/"):] + "/frozen/"
    keys = s3_server.keys(prefix)
    committed = sorted({k[len(prefix):].split("/")[0] for k in keys
                        if k.endswith(constants.COMMIT_MARKER)})
    assert committed == [f"checkpoint_{i:06d}" for i in range(5)]


@pytest.fixture
def small_tmpfs(tmp_path):
    """An 8 MiB tmpfs mounted at a fresh directory (root with mount rights only)."""
    mount_point = tmp_path / "small_disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("disk-full test needs root to mount a small tmpfs (run the suite as "
                    "root, e.g. in CI's container, to cover it)")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs",
                           str(mount_point)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode}); "
                    "the disk-full test needs CAP_SYS_ADMIN")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def test_disk_full_fails_cleanly_and_keeps_the_previous_checkpoint(ray_start_4_cpus,
                                                                   small_tmpfs):
    storage = str(small_tmpfs)
    run = RunConfig(storage_path=storage, name="full", verbose=0,
                    failure_config=FailureConfig(max_failures=0),
                    checkpoint_config=CheckpointConfig(num_to_keep=None))
    # 2 ranks × 3 MiB a round; a round is written once the one before is committed (the
    # second round then finds 3 of 8 MiB taken and 6 more to write).
    config = {"epochs": 4, "delay": 1.0, "size": 3 * 2 ** 20,
              "commits_in": os.path.join(storage, "full")}
    with pytest.raises(TrainingFailedError) as info:
        TorchTrainer(_paced_checkpoints, train_loop_config=config,
                     scaling_config=ScalingConfig(num_workers=2), run_config=run).fit()
    assert "No space left on device" in str(info.value)
    # The first checkpoint is committed and whole; the round that hit the full disk
    # left nothing that looks like a checkpoint.
    run_dir = os.path.join(storage, "full")
    checkpoints = sorted(d for d in os.listdir(run_dir) if d.startswith("checkpoint_"))
    assert checkpoints == ["checkpoint_000000"]
    first = os.path.join(run_dir, "checkpoint_000000")
    assert os.path.exists(os.path.join(first, constants.COMMIT_MARKER))
    assert Checkpoint.from_directory(first).to_dict()["epoch"] == 0
    assert info.value.result.checkpoint.path == first
    # Space freed (the tmpfs grown): the same run resumes from it and finishes.
    subprocess.run(["mount", "-o", "remount,size=64m", storage], check=True)
    result = TorchTrainer(_paced_checkpoints, train_loop_config=config,
                          scaling_config=ScalingConfig(num_workers=2),
                          run_config=run).fit()
    assert result.checkpoint.to_dict()["epoch"] == 3
    assert list(result.metrics_dataframe["epoch"]) == [0, 1, 2, 3]


def test_a_full_disk_keeps_the_round_that_was_waiting_for_its_commit(small_tmpfs):
    """Round 1 is staged by both ranks, but the driver has rank 1's report only after
    rank 0 failed staging round 2 on the disk that round filled. Round 1 is complete and
    must be committed: its commit (the run record, the marker) needs room, which the
    failed round's partial files took. No Ray: the worker group is scripted."""
    from engine._internal.worker_group.backend import BackendConfig
    from engine._internal.execution.controller import Controller, RunSpec
    from engine._internal.worker_group.group import PollResult
    from tests.support.fakes import FakeWorkerGroup, raised

    run_dir = os.path.join(str(small_tmpfs), "run")
    pending = {}

    def round_1_then_rank_0_fills_the_disk():
        r0 = _stage(run_dir, "001", 1, 0, 2 ** 20)
        pending[1] = _stage(run_dir, "001", 1, 1, 2 ** 20)
        partial = os.path.join(run_dir, ".staging", "001_000002", "rank_0")
        os.makedirs(partial)
        full = _fill(os.path.join(partial, "w0.bin"))  # rank 0 staging round 2
        return [PollResult(0, [r0], True, error=raised(0, full).error)]

    script = [round_1_then_rank_0_fills_the_disk, lambda: [PollResult(1, [pending[1]])]]
    spec = RunSpec(train_func=lambda: None, train_loop_config={},
                   scaling_config=ScalingConfig(num_workers=2),
                   run_config=RunConfig(name="run", storage_path=str(small_tmpfs), verbose=0),
                   backend_config=BackendConfig())
    with pytest.raises(TrainingFailedError) as info:
        Controller(spec, worker_group_cls=FakeWorkerGroup.scripted([script])).run()
    assert "No space left on device" in str(info.value)
    ckpt = info.value.result.checkpoint
    assert ckpt is not None and ckpt.path == os.path.join(run_dir, "checkpoint_000000")
    assert os.path.exists(os.path.join(ckpt.path, constants.COMMIT_MARKER))
    assert {"w0.bin", "w1.bin"} <= set(os.listdir(ckpt.path))  # both ranks' files
    assert [h["training_iteration"] for h in info.value.result.history] == [1]


def _stage(run_dir, attempt, iteration, rank, size):
    """What a rank stages for a round: a file in the run's staging area, and its report."""
    from engine._internal.worker_group.session import ReportItem

    staging = os.path.join(run_dir, ".staging", f"{attempt}_{iteration:06d}", f"rank_{rank}")
    os.makedirs(staging)
    with open(os.path.join(staging, f"w{rank}.bin"), "wb") as f:
        f.write(os.urandom(size))
    return ReportItem(iteration, {"training_iteration": iteration, "rank": rank},
                      checkpoint_staging=staging, checkpoint_files=[f"w{rank}.bin"])


def _fill(path):
    """Writes ``path`` until the disk is full; returns the ENOSPC error."""
    import errno

    with pytest.raises(OSError) as full, open(path, "wb") as f:
        while True:
            f.write(os.urandom(2 ** 16))
            f.flush()
    assert full.value.errno == errno.ENOSPC
    return full.value


def test_a_disk_another_program_filled_fails_the_commit_cleanly_and_the_run_resumes(
        small_tmpfs):
    """Both ranks staged round 2, then another program filled the disk before the driver
    committed it; the commit needs room (the model card, the record, the marker). The
    run fails saying so and what it keeps (before: a bare OSError out of fit(), with the
    in-memory bookkeeping pointing at the checkpoint that never committed); once space
    is freed, fit() again resumes from round 1's checkpoint. No Ray: the worker group is
    scripted."""
    from engine._internal.worker_group.backend import BackendConfig
    from engine._internal.execution.controller import Controller, RunSpec
    from engine._internal.worker_group.group import PollResult
    from tests.support.fakes import FakeWorkerGroup

    run_dir = os.path.join(str(small_tmpfs), "run")
    ballast = os.path.join(str(small_tmpfs), "another_program.bin")

    def spec():
        return RunSpec(train_func=lambda: None, train_loop_config={},
                       scaling_config=ScalingConfig(num_workers=2),
                       run_config=RunConfig(name="run", storage_path=str(small_tmpfs),
                                            verbose=0),
                       backend_config=BackendConfig())

    def round_(attempt, iteration, finished=False, then=None):
        def answer():
            items = [_stage(run_dir, attempt, iteration, r, 2 ** 16) for r in (0, 1)]
            if then is not None:
                then()
            return [PollResult(r, [items[r]], finished) for r in (0, 1)]
        return answer

    first = FakeWorkerGroup.scripted([[round_("001", 1),
                                       round_("001", 2, then=lambda: _fill(ballast))]])
    with pytest.raises(TrainingFailedError) as info:
        Controller(spec(), worker_group_cls=first).run()
    message = str(info.value)
    assert "Could not commit checkpoint_000001" in message, message
    assert "No space left on device" in message, message
    assert "latest checkpoint is still checkpoint_000000" in message, message
    assert "fit() again" in message, message
    kept = os.path.join(run_dir, "checkpoint_000000")
    assert info.value.result.checkpoint.path == kept
    assert Checkpoint.from_directory(kept).path == kept
    assert os.path.exists(os.path.join(kept, constants.COMMIT_MARKER))
    # Nothing of the failed commit is left to look like a checkpoint.
    assert sorted(d for d in os.listdir(run_dir) if d.startswith("checkpoint_")) \
        == ["checkpoint_000000"]

    os.remove(ballast)  # space freed: the same run resumes from round 1's checkpoint
    resumed = FakeWorkerGroup.scripted([[round_("002", 2, finished=True)]])
    result = Controller(spec(), worker_group_cls=resumed).run()
    assert resumed.started[0].session_args[0]["checkpoint"].path == kept
    assert result.checkpoint.path == os.path.join(run_dir, "checkpoint_000001")
    assert {"w0.bin", "w1.bin"} <= set(os.listdir(result.checkpoint.path))
    assert [h["training_iteration"] for h in result.history] == [1, 2]
