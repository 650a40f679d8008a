"""Runs whose storage_path is s3:// on a moto server on loopback, 2 torch workers.

The workers stage their checkpoint files to S3 themselves, the driver commits file by
file (no rename on S3) and writes the commit marker last, retention deletes old
checkpoints in the bucket, and a re-run resumes from S3. Credentials (fake) never show.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile

import pytest

import engine
from engine import (Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig,
                    TrainingFailedError, constants)
from engine.exceptions import StorageError
from engine.torch import TorchTrainer
from tests.conftest import FAKE_AWS_SECRET
from tests.support.ray_logs import ray_log_text

# The module's fits check what training produced, not how workers start: they run on
# warm pooled workers (tests/README.md, "How a new test pays for itself").
pytestmark = pytest.mark.usefixtures("pooled_workers")


SCORES = [0.1, 0.9, 0.3, 0.8, 0.2, 0.5]
MARKER = constants.COMMIT_MARKER


def _barrier():
    """Keep the ranks in step, as a real DDP loop does, so a planned failure of one rank
    comes after the other rank's report of the previous round (deterministic commits)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _train_func(config):
    """Each rank writes a shared state.json (rank 0's copy is kept) and its own shard."""
    rank = engine.get_context().get_world_rank()
    start = 0
    resumed = engine.get_checkpoint()
    if resumed is not None:
        assert resumed.uri.startswith("s3://") and "?" not in resumed.uri
        # The checkpoint arrived pickled with its endpoint; its bare URI reopens it too.
        with Checkpoint(resumed.uri).as_directory() as d:
            with open(os.path.join(d, "state.json")) as f:
                state = json.load(f)
            assert state["rank"] == 0, state
            assert {"shard_0.bin", "shard_1.bin"} <= set(os.listdir(d)), os.listdir(d)
        start = state["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        if epoch == config.get("fail_at") and resumed is None and rank == config["fail_rank"]:
            raise RuntimeError(f"planned failure at epoch {epoch}")
        d = tempfile.mkdtemp(prefix="s3_test_ckpt_")
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"epoch": epoch, "rank": rank}, f)
        with open(os.path.join(d, f"shard_{rank}.bin"), "wb") as f:
            f.write(bytes([rank]) * 4096)
        engine.report({"epoch": epoch, "score": SCORES[epoch], "start": start},
                      checkpoint=Checkpoint.from_directory(d))
        shutil.rmtree(d)  # report() has uploaded this rank's files already
        _barrier()


def _run_prefix(result_path: str, bucket: str) -> str:
    assert result_path.startswith(f"s3://{bucket}/"), result_path
    return result_path[len(f"s3://{bucket}/"):]


# Beside the checkpoints and logs: the run record, the trainer kept for Trainer.restore
# and the run's ownership lease (released, not deleted).
RUN_FILES = {constants.RUN_STATE_FILE, constants.TRAINER_STATE_FILE, ".run_lease.json"}


def _tree(s3_server, prefix: str, bucket: str = "") -> dict:
    """{top-level name under the run dir: set of files in it} from a raw bucket listing;
    the run dir's own directory marker (``prefix/``) is the only marker allowed."""
    out: dict = {}
    for key in s3_server.keys(prefix + "/", bucket=bucket):
        rel = key[len(prefix) + 1:]
        if rel == "":
            continue
        top, _, rest = rel.partition("/")
        assert rest == "" or not rest.endswith("/"), f"stray directory marker {key}"
        out.setdefault(top, set())
        if rest:
            out[top].add(rest)
    return out


def _read_record(s3_server, prefix: str, bucket: str = "") -> dict:
    body = s3_server.client().get_object(Bucket=bucket or s3_server.bucket,
                                         Key=f"{prefix}/{constants.RUN_STATE_FILE}")["Body"]
    return json.loads(body.read())


# What the default loggers (result.json, progress.csv) write beside the checkpoints.
LOG_FILES = {constants.RESULT_JSON_FILE, constants.PROGRESS_CSV_FILE,
             constants.PARAMS_JSON_FILE}


def _result_json(s3_server, prefix: str) -> list:
    body = s3_server.client().get_object(Bucket=s3_server.bucket,
                                         Key=f"{prefix}/{constants.RESULT_JSON_FILE}")["Body"]
    return [json.loads(line) for line in body.read().decode().splitlines()]


def _trainer(config, run_config):
    return TorchTrainer(_train_func, train_loop_config=config,
                        scaling_config=ScalingConfig(num_workers=2), run_config=run_config)


def test_checkpoints_and_retention_on_s3(ray_start_4_cpus, s3_server, s3_storage_path,
                                         tmp_path):
    ckpt_config = CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="score",
                                   checkpoint_score_order="max")
    result = _trainer({"epochs": 5}, RunConfig(name="retain", storage_path=s3_storage_path,
                                               checkpoint_config=ckpt_config)).fit()
    bucket = s3_server.bucket
    prefix = _run_prefix(result.path, bucket)
    assert prefix.endswith("/retain") and "?" not in result.path
    assert result.metrics["epoch"] == 4

    # The bucket holds exactly the kept checkpoints (best two by score + the latest),
    # each complete and committed, the run record and the logs; no staging left behind.
    shard_files = {MARKER, "model_card.json", "state.json", "shard_0.bin", "shard_1.bin"}
    assert _tree(s3_server, prefix) == {
        "checkpoint_000001": shard_files, "checkpoint_000003": shard_files,
        "checkpoint_000004": shard_files,
        **{name: set() for name in RUN_FILES | LOG_FILES}}
    assert [row["epoch"] for row in _result_json(s3_server, prefix)] == [0, 1, 2, 3, 4]
    record = _read_record(s3_server, prefix)
    assert record["state"] == "FINISHED"
    assert [c["dir_name"] for c in record["checkpoints"]["checkpoints"]] == [
        "checkpoint_000001", "checkpoint_000003", "checkpoint_000004"]
    marker = json.loads(s3_server.client().get_object(
        Bucket=bucket, Key=f"{prefix}/checkpoint_000004/{MARKER}")["Body"].read())
    assert marker["index"] == 4 and sorted(marker["files"]) == sorted(shard_files - {MARKER})

    # Result checkpoints: plain s3:// URIs, readable on the driver.
    ckpt = result.checkpoint
    assert ckpt.uri == f"s3://{bucket}/{prefix}/checkpoint_000004"
    assert [c.uri.rsplit("/", 1)[1] for c, _ in result.best_checkpoints] == [
        "checkpoint_000001", "checkpoint_000003"]
    assert [m["score"] for _, m in result.best_checkpoints] == [0.9, 0.8]
    with ckpt.as_directory() as d:
        with open(os.path.join(d, "state.json")) as f:
            assert json.load(f) == {"epoch": 4, "rank": 0}
        with open(os.path.join(d, "shard_1.bin"), "rb") as f:
            assert f.read() == bytes([1]) * 4096
    out = ckpt.to_directory(str(tmp_path / "out"))
    assert shard_files <= set(os.listdir(out))
    reopened = Checkpoint(ckpt.uri)  # the bare URI reopens the same server here
    with reopened.as_directory() as d:
        assert json.load(open(os.path.join(d, "state.json")))["epoch"] == 4


def test_dict_checkpoints_from_driver_on_s3(ray_start_4_cpus, s3_server, s3_storage_path):
    def f():
        for i in range(2):
            engine.report({"i": i}, checkpoint=Checkpoint.from_dict({"i": i, "w": [1.0] * 3}))

    result = TorchTrainer(f, scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(storage_path=s3_storage_path)).fit()
    assert result.checkpoint.uri.startswith(f"s3://{s3_server.bucket}/")
    assert result.checkpoint.to_dict() == {"i": 1, "w": [1.0] * 3}
    assert Checkpoint(result.checkpoint.uri).to_dict() == {"i": 1, "w": [1.0] * 3}


def test_retry_within_a_run_restores_from_s3(ray_start_4_cpus, s3_server, s3_storage_path):
    result = _trainer({"epochs": 4, "fail_at": 2, "fail_rank": 1},
                      RunConfig(name="retry", storage_path=s3_storage_path,
                                failure_config=FailureConfig(max_failures=1))).fit()
    assert result.num_failures == 1
    assert result.metrics["epoch"] == 3 and result.metrics["start"] == 2
    assert list(result.metrics_dataframe["epoch"]) == [0, 1, 2, 3]


def test_resume_by_refit_after_failed_run(ray_start_4_cpus, s3_server, s3_storage_path):
    run_config = RunConfig(name="resume", storage_path=s3_storage_path,
                           checkpoint_config=CheckpointConfig(num_to_keep=2),
                           failure_config=FailureConfig(max_failures=0))
    config = {"epochs": 5, "fail_at": 3, "fail_rank": 0}
    with pytest.raises(TrainingFailedError, match="planned failure at epoch 3") as ei:
        _trainer(config, run_config).fit()
    failed = ei.value.result
    assert failed.checkpoint.uri.endswith("/resume/checkpoint_000002")
    prefix = _run_prefix(failed.path, s3_server.bucket)
    assert _read_record(s3_server, prefix)["state"] == "ERRORED"
    assert set(_tree(s3_server, prefix)) == {"checkpoint_000001", "checkpoint_000002",
                                            } | RUN_FILES | LOG_FILES
    # S3 has no append: the logs were written whole at each checkpoint and at the end.
    assert [row["epoch"] for row in _result_json(s3_server, prefix)] == [0, 1, 2]

    result = _trainer(config, run_config).fit()  # same name + storage: resume from S3
    assert result.metrics["start"] == 3 and result.metrics["epoch"] == 4
    assert list(result.metrics_dataframe["epoch"]) == [0, 1, 2, 3, 4]
    # Numbering went on (no overwrite of checkpoint_000002) and retention held.
    assert result.checkpoint.uri.endswith("/resume/checkpoint_000004")
    tree = _tree(s3_server, prefix)
    assert set(tree) == {"checkpoint_000003", "checkpoint_000004"} | RUN_FILES | LOG_FILES
    assert all(MARKER in files for name, files in tree.items()
               if name.startswith(constants.CHECKPOINT_DIR_PREFIX))
    # The resumed run redid no logged round twice: each epoch once, in order.
    assert [row["epoch"] for row in _result_json(s3_server, prefix)] == [0, 1, 2, 3, 4]
    assert _read_record(s3_server, prefix)["state"] == "FINISHED"
    with result.checkpoint.as_directory() as d:
        assert json.load(open(os.path.join(d, "state.json"))) == {"epoch": 4, "rank": 0}


def test_missing_bucket_fails_before_any_worker_starts(ray_start_4_cpus, s3_server,
                                                       monkeypatch):
    from engine._internal.worker_group import group as worker_group

    def no_workers(self):
        raise AssertionError("a worker group was started for a missing bucket")

    monkeypatch.setattr(worker_group.WorkerGroup, "start", no_workers)
    uri = s3_server.uri("runs", bucket="trainyard-no-such-bucket")
    with pytest.raises(StorageError, match="bucket 'trainyard-no-such-bucket' does not exist") \
            as ei:
        _trainer({"epochs": 1}, RunConfig(name="nobucket", storage_path=uri)).fit()
    message = str(ei.value)
    assert "s3://trainyard-no-such-bucket/runs/nobucket" in message
    assert FAKE_AWS_SECRET not in message and "endpoint_override" not in message


def test_credentials_never_show(ray_start_4_cpus, s3_server, caplog, capfd):
    """Credentials in the storage URI itself (and the env ones) appear in no error
    message, log line, run record, Result or Checkpoint URI."""
    caplog.set_level(logging.INFO, logger="engine")
    uri_secret = "tyUriSecret-" + os.urandom(8).hex()
    bucket = "trainyard-test-secrets"  # own bucket: bare URIs of it reuse this fs
    s3_server.client().create_bucket(Bucket=bucket)
    uri = s3_server.uri("runs", bucket=bucket).replace("s3://", f"s3://test-key-id:{uri_secret}@")

    # A run that fails after committing checkpoints: error, record, logs, Result.
    with pytest.raises(TrainingFailedError) as ei:
        _trainer({"epochs": 3, "fail_at": 2, "fail_rank": 1},
                 RunConfig(name="secrets", storage_path=uri,
                           failure_config=FailureConfig(max_failures=0))).fit()
    result = ei.value.result
    assert result.checkpoint.uri == f"s3://{bucket}/runs/secrets/checkpoint_000001"
    with result.checkpoint.as_directory() as d:  # the explicit credentials still work
        assert json.load(open(os.path.join(d, "state.json")))["epoch"] == 1
    record_text = json.dumps(_read_record(s3_server, "runs/secrets", bucket=bucket))
    assert "planned failure" in record_text

    # A storage error with the credentials in the URI.
    bad = s3_server.uri("runs", bucket="trainyard-missing").replace(
        "s3://", f"s3://test-key-id:{uri_secret}@")
    with pytest.raises(StorageError) as bad_ei:
        _trainer({"epochs": 1}, RunConfig(name="bad", storage_path=bad)).fit()

    captured = capfd.readouterr()
    texts = {
        "error": str(ei.value), "storage error": str(bad_ei.value),
        "result": repr(result) + result.path + repr(result.best_checkpoints),
        "record": record_text, "log records": caplog.text,
        "stdout/stderr (incl. worker output)": captured.out + captured.err,
        "ray logs": ray_log_text(),
    }
    assert "planned failure" in texts["error"] and "does not exist" in texts["storage error"]
    assert texts["ray logs"] and "secrets/checkpoint_000001" in texts["result"]
    for what, text in texts.items():
        assert uri_secret not in text, f"URI secret leaked into {what}"
        assert FAKE_AWS_SECRET not in text, f"env secret leaked into {what}"
