"""Real faults: SIGKILLed workers and drivers, interrupted commits, resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import engine
from engine import (Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig,
                    TrainingFailedError, constants)
from engine.callbacks import Callback
from engine.torch import TorchTrainer
from pipelines import digits
from tests.support.fakes import KillWorkerOnce
from tests.support.subprocess_env import driver_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# Epochs paced at 1 s so that a kill sent when round k arrives lands mid-training even
# when the driver lags behind the workers on a loaded machine.
DIGITS = {"epochs": 6, "lr": 3e-3, "batch_size": 64, "seed": 11, "epoch_delay_s": 1.0}


@pytest.fixture(scope="module")
def fault_free(ray_session, tmp_path_factory):
    storage = str(tmp_path_factory.mktemp("fault_free"))
    return TorchTrainer(digits.train_func, train_loop_config=DIGITS,
                        scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(storage_path=storage)).fit()


# (rank killed, round it is killed at). These were drawn from random seeds 0-4 and 5-6
# before; seed 3 drew seed 1's case again (rank 0 at round 3), a whole run that proved
# nothing new. The S3 runs take the cases the local ones leave out.
LOCAL_KILLS = [(1, 2), (0, 3), (0, 1), (0, 2)]
S3_KILLS = [(1, 3), (1, 1)]


@pytest.mark.parametrize("rank,at_round", LOCAL_KILLS, ids=lambda v: str(v))
def test_worker_sigkill_recovers_to_same_model(fault_free, storage_path, rank, at_round):
    _sigkill_run_matches_fault_free(fault_free, storage_path, rank, at_round)


@pytest.mark.parametrize("rank,at_round", S3_KILLS, ids=lambda v: str(v))
def test_worker_sigkill_on_s3_recovers_to_same_model(fault_free, s3_storage_path, s3_server,
                                                     rank, at_round):
    result = _sigkill_run_matches_fault_free(fault_free, s3_storage_path, rank, at_round,
                                             local=False)
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(
        Bucket=s3_server.bucket, Prefix=result.path.split(s3_server.bucket + "/", 1)[1]
    ).get("Contents", [])]
    markers = sorted(k for k in keys if k.endswith(".trainyard_committed"))
    assert len(markers) == DIGITS["epochs"]  # every epoch's checkpoint committed once
    assert not [k for k in keys if "/.staging/" in k]


def _sigkill_run_matches_fault_free(fault_free, storage, rank, at_round, local=True):
    killer = KillWorkerOnce(rank=rank, at_iteration=at_round)
    result = TorchTrainer(
        digits.train_func, train_loop_config=DIGITS,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, callbacks=[killer],
                             failure_config=FailureConfig(max_failures=3)),
    ).fit()
    assert killer.killed_pid is not None and killer.retries == 1
    assert result.num_failures == 1
    assert result.metrics["epoch"] == DIGITS["epochs"] - 1
    # Deterministic training resumed from the last committed checkpoint ends with the
    # very weights of the run that never failed.
    assert result.metrics["weights_checksum"] == fault_free.metrics["weights_checksum"]
    if not local:
        return result
    # Every committed checkpoint is readable and numbered without gaps or overwrites.
    names = sorted(n for n in os.listdir(result.path) if n.startswith("checkpoint_"))
    assert names == [f"checkpoint_{i:06d}" for i in range(len(names))]
    epochs = [Checkpoint.from_directory(os.path.join(result.path, n)).to_dict()["epoch"]
              for n in names]
    assert epochs == sorted(epochs) and epochs[-1] == DIGITS["epochs"] - 1
    for n in names:
        assert os.path.exists(os.path.join(result.path, n, ".trainyard_committed"))
    # The metrics history shows each epoch once, in order.
    assert list(result.metrics_dataframe["epoch"]) == list(range(DIGITS["epochs"]))
    return result


def test_max_failures_zero_fails_at_once(ray_start_4_cpus, storage_path):
    killer = KillWorkerOnce(rank=1, at_iteration=1)
    with pytest.raises(TrainingFailedError, match="rank 1.*died") as info:
        TorchTrainer(digits.train_func, train_loop_config=DIGITS,
                     scaling_config=ScalingConfig(num_workers=2),
                     run_config=RunConfig(storage_path=storage_path, callbacks=[killer])).fit()
    assert info.value.result.checkpoint is not None  # what was committed survives


def _counting_func(config):
    """Reports n checkpoints, resuming from get_checkpoint(); rank 1 dies once at
    ``die_at`` when asked (a real process exit, no exception)."""
    start = 0
    ckpt = engine.get_checkpoint()
    if ckpt is not None:
        start = ckpt.to_dict()["i"] + 1
    for i in range(start, config["n"]):
        marker = config.get("die_marker")
        if (marker and i == config["die_at"] and engine.get_context().get_world_rank() == 1
                and not os.path.exists(marker)):
            open(marker, "w").close()
            _await_committed(i - 1)
            os.kill(os.getpid(), signal.SIGKILL)
        score = config["scores"][i] if "scores" in config else i
        engine.report({"i": i, "score": score}, checkpoint=Checkpoint.from_dict({"i": i}))


def _await_committed(index: int, timeout_s: float = 120.0) -> None:
    """Wait until the driver has committed checkpoint ``index`` of this run: reports are
    collected asynchronously, so a worker killed right after reporting can take rounds
    the driver has not collected yet with it (a fixed 1 s sleep here was not enough on
    a loaded machine)."""
    if index < 0:
        return
    marker = os.path.join(engine.get_context().get_trial_dir(),
                          f"checkpoint_{index:06d}", constants.COMMIT_MARKER)
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize("scored", [False, True])
def test_num_to_keep_over_ten_checkpoints_across_a_retry(ray_start_4_cpus, storage_path,
                                                         tmp_path, scored):
    scores = [5, 1, 9, 3, 8, 2, 7, 0, 6, 4]
    cfg = {"n": 10, "die_at": 6, "die_marker": str(tmp_path / "died")}
    ckpt_cfg = CheckpointConfig(num_to_keep=3)
    if scored:
        cfg["scores"] = scores
        ckpt_cfg = CheckpointConfig(num_to_keep=3, checkpoint_score_attribute="score")
    result = TorchTrainer(_counting_func, train_loop_config=cfg,
                          scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(storage_path=storage_path,
                                               checkpoint_config=ckpt_cfg,
                                               failure_config=FailureConfig(max_failures=1))
                          ).fit()
    assert result.num_failures == 1
    kept = sorted(n for n in os.listdir(result.path) if n.startswith("checkpoint_"))
    if scored:  # best 3 scores are i=2 (9), 4 (8), 6 (7); the latest is i=9
        assert [m["i"] for _, m in result.best_checkpoints] == [2, 4, 6]
        assert kept == ["checkpoint_000002", "checkpoint_000004", "checkpoint_000006",
                        "checkpoint_000009"]
    else:
        assert [m["i"] for _, m in result.best_checkpoints] == [7, 8, 9]
        assert kept == ["checkpoint_000007", "checkpoint_000008", "checkpoint_000009"]
    assert result.checkpoint.to_dict() == {"i": 9}


DRIVER = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, {repo!r})
    import engine
    from engine import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig
    from engine.torch import TorchTrainer

    def train_func(config):
        start = 0
        ckpt = engine.get_checkpoint()
        if ckpt is not None:
            start = ckpt.to_dict()["epoch"] + 1
        if engine.get_context().get_world_rank() == 0:
            with open(config["log"], "a") as fh:
                fh.write(json.dumps({{"start": start}}) + "\\n")
        for epoch in range(start, config["epochs"]):
            time.sleep(config["sleep"])
            engine.report({{"epoch": epoch}},
                          checkpoint=Checkpoint.from_dict({{"epoch": epoch}}))
            if start == 0 and epoch == config.get("hold_after"):
                time.sleep(300)  # nothing happens after this commit: the test kills us

    result = TorchTrainer(
        train_func, train_loop_config=json.loads(sys.argv[1]),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="driver-crash", storage_path=sys.argv[2],
                             checkpoint_config=CheckpointConfig(num_to_keep=2)),
    ).fit()
    df = result.metrics_dataframe
    print("FINAL", json.dumps({{"epoch": result.metrics["epoch"],
                               "checkpoint": result.checkpoint.path,
                               "iterations": [int(i) for i in df["training_iteration"]],
                               "epochs": [int(e) for e in df["epoch"]]}}))
""")


def _kill_driver_when(proc, path, timeout_s=120):
    """SIGKILL the driver (alone, as a lost head node would be) once ``path`` exists,
    then whatever of its process group outlived it (its local Ray's processes)."""
    deadline = time.time() + timeout_s
    while not os.path.exists(path) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert os.path.exists(path), proc.stdout.read().decode()[-3000:] if proc.poll() else ""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: its own group
    except ProcessLookupError:
        pass


def test_driver_sigkill_then_refit_resumes(storage_path, tmp_path):
    """The driver dies right after committing epoch 2's checkpoint (the workers hold
    after it, so nothing else happens); fit() again resumes after epoch 2, numbering
    goes on, and the history holds every round exactly once. (The round of that last
    checkpoint was once lost for good: the record was saved with the checkpoint but
    without its round, and a resume keeps the rounds up to its checkpoint.)"""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(repo=REPO))
    log = tmp_path / "starts.jsonl"
    cfg = json.dumps({"epochs": 8, "sleep": 0.4, "log": str(log), "hold_after": 2})
    run_dir = os.path.join(storage_path, "driver-crash")
    proc = subprocess.Popen([sys.executable, str(script), cfg, storage_path], env=driver_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    _kill_driver_when(proc, os.path.join(run_dir, "checkpoint_000002", ".trainyard_committed"))
    assert json.load(open(os.path.join(run_dir, "run_state.json")))["state"] == "RUNNING"

    out = subprocess.run([sys.executable, str(script), cfg, storage_path], env=driver_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    final = json.loads(out.stdout.split("FINAL", 1)[1])
    assert final["epoch"] == 7
    starts = [json.loads(line)["start"] for line in log.read_text().splitlines()]
    assert starts == [0, 3]  # resumed after epoch 2's checkpoint, not before it
    # Numbering went on: the checkpoint of epoch 7 is checkpoint_000007, nothing overwritten.
    assert final["checkpoint"].endswith("checkpoint_000007")
    kept = sorted(n for n in os.listdir(run_dir) if n.startswith("checkpoint_"))
    assert kept == ["checkpoint_000006", "checkpoint_000007"]  # num_to_keep=2 held
    # Every round exactly once, in Result.metrics_dataframe and in the run record.
    assert final["iterations"] == list(range(1, 9)) and final["epochs"] == list(range(8))
    record = json.load(open(os.path.join(run_dir, "run_state.json")))
    assert [row["training_iteration"] for row in record["history"]] == list(range(1, 9))
    assert record["state"] == "FINISHED"


def test_interrupted_commit_resumes_from_previous_checkpoint(ray_start_4_cpus, storage_path,
                                                             tmp_path):
    """A checkpoint whose files landed but whose marker was never written (the driver
    died in between) is never used and is cleaned up on resume."""
    rc = RunConfig(name="torn", storage_path=storage_path,
                   failure_config=FailureConfig(max_failures=0))
    cfg = {"n": 3, "die_at": 2, "die_marker": str(tmp_path / "died")}
    with pytest.raises(TrainingFailedError):
        TorchTrainer(_counting_func, train_loop_config=cfg,
                     scaling_config=ScalingConfig(num_workers=2), run_config=rc).fit()
    run_dir = os.path.join(storage_path, "torn")
    # Simulate the torn write: the next checkpoint's shards are there, the marker is not.
    torn = os.path.join(run_dir, "checkpoint_000002")
    os.makedirs(torn)
    Checkpoint.from_dict({"i": 99}).to_directory(torn)
    state = json.load(open(os.path.join(run_dir, "run_state.json")))
    state["state"] = "RUNNING"  # as if the driver had died rather than failed cleanly
    json.dump(state, open(os.path.join(run_dir, "run_state.json"), "w"))

    seen = []

    class FirstReport(Callback):
        def on_report(self, metrics, all_metrics):
            seen.append(metrics["i"])

    rc2 = RunConfig(name="torn", storage_path=storage_path, callbacks=[FirstReport()])
    # The same config (a run is its config); rank 1 does not die again, its marker is
    # there.
    result = TorchTrainer(_counting_func, train_loop_config=cfg,
                          scaling_config=ScalingConfig(num_workers=2), run_config=rc2).fit()
    assert seen == [2]  # resumed after checkpoint i=1, not from the torn i=99
    assert result.checkpoint.to_dict() == {"i": 2}
    assert result.checkpoint.path.endswith("checkpoint_000002")


def test_collective_hung_past_timeout_fails_the_run(ray_start_4_cpus, storage_path):
    """Rank 1 never enters the allreduce: rank 0's collective ends at
    TorchConfig.timeout_s and the run fails (no retries left) instead of hanging."""
    from engine.torch import TorchConfig

    def f():
        import torch
        import torch.distributed as dist

        engine.report({"step": 0})
        if engine.get_context().get_world_rank() == 1:
            time.sleep(120)  # stuck: never reaches the collective
        dist.all_reduce(torch.ones(1))
        engine.report({"step": 1})

    with pytest.raises(TrainingFailedError, match="rank 0") as info:
        TorchTrainer(f, torch_config=TorchConfig(timeout_s=5),
                     scaling_config=ScalingConfig(num_workers=2),
                     run_config=RunConfig(storage_path=storage_path)).fit()
    assert info.value.result.metrics["step"] == 0
    # The error names who waited, who never arrived, and where the latter was.
    message = str(info.value)
    assert "collective timed out: rank 0 waited in it past the backend timeout" in message
    assert "rank 1 never arrived" in message
    assert "rank 1 was at:" in message and "time.sleep(120)" in message
