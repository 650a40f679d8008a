"""The ray_job mode's pieces that need no cluster: settings, names, what goes where
(credentials only in the job's env vars), errors mapped back, the log prefix."""

from __future__ import annotations

import pytest

from engine.exceptions import ConfigError
from tasks import _jobs
from tasks._job_entry import _earlier_attempt


def test_mode_and_address_from_arguments_then_environment(monkeypatch):
    monkeypatch.delenv(_jobs.EXECUTION_ENV_VAR, raising=False)
    assert _jobs.execution_mode() == "local"
    monkeypatch.setenv(_jobs.EXECUTION_ENV_VAR, "ray_job")
    assert _jobs.execution_mode() == "ray_job" and _jobs.execution_mode("local") == "local"
    with pytest.raises(ConfigError, match="TRAINYARD_EXECUTION"):
        _jobs.execution_mode("cluster")
    monkeypatch.delenv(_jobs.JOB_ADDRESS_ENV_VAR, raising=False)
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")  # a GCS address is not a job server
    with pytest.raises(ConfigError, match="TRAINYARD_RAY_JOB_ADDRESS"):
        _jobs.job_address()
    monkeypatch.setenv("RAY_ADDRESS", "http://head:8265/")
    assert _jobs.job_address() == "http://head:8265"
    monkeypatch.setenv(_jobs.JOB_ADDRESS_ENV_VAR, "https://jobs.example:443")
    assert _jobs.job_address() == "https://jobs.example:443"
    assert _jobs.job_address("http://other:8265") == "http://other:8265"


def test_job_names_are_deterministic_safe_and_short():
    name = _jobs.job_name("train", "retrain_digits-train-manual__2026-01-01T00:00:00+00:00")
    assert name == _jobs.job_name("train",
                                  "retrain_digits-train-manual__2026-01-01T00:00:00+00:00")
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
    long = _jobs.job_name("train", "x" * 300)
    assert len(long) <= 100 and long != _jobs.job_name("train", "x" * 299)


def test_credentials_go_only_into_the_jobs_environment(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key-id")
    storage = "s3://id:pw-secret@bucket/root?endpoint_override=minio:9000&scheme=http"
    env = _jobs.job_runtime_env({"env_vars": {"AWS_ACCESS_KEY_ID": "job-own-id"},
                                 "pip": ["x"]}, storage, "trainyard-train-r", "r-a1",
                                "airflow:d/r/t")["env_vars"]
    assert env["AWS_SECRET_ACCESS_KEY"] == "s3cr3t-value"
    assert env["AWS_ACCESS_KEY_ID"] == "job-own-id"  # runtime_env's own value wins
    assert env["TRAINYARD_STORAGE_PATH"] == storage
    assert env["TRAINYARD_ORCHESTRATOR_RUN_ID"] == "airflow:d/r/t/r-a1"
    request = _jobs.strip_secrets({"run": {"storage": storage},
                                   "datasets": [{"uri": "s3://bucket/root/d"}]})
    assert request == {"run": {"storage": "s3://bucket/root"},
                       "datasets": [{"uri": "s3://bucket/root/d"}]}
    job = _jobs.StepJob("train", {}, "trainyard-train-r", storage, "http://h:8265",
                        orchestrator_run_id="airflow:d/r/t")
    assert "secret" not in repr(job.metadata()) and "pw-" not in repr(job.metadata())
    with pytest.raises(ConfigError, match="runtime_env"):
        _jobs.job_runtime_env(["pip"], storage, "n", "n-a1", None)  # type: ignore[arg-type]


def test_memory_storage_is_refused_before_anything_is_submitted(monkeypatch):
    monkeypatch.delenv("TRAINYARD_STORAGE_PATH", raising=False)
    with pytest.raises(ConfigError, match="s3://"):
        _jobs.job_storage_root("memory://experiments")


def test_job_errors_keep_their_kind():
    logs = ("Traceback ...\n" + _jobs.ERROR_LINE_PREFIX
            + '{"type": "ConfigError", "message": "run has unknown keys [\'lr\']"}\n')
    err = _jobs.job_error("j-a1", "FAILED", "JOB_ENTRYPOINT_COMMAND_ERROR", logs)
    assert isinstance(err, ConfigError) and "unknown keys" in str(err)
    err = _jobs.job_error("j-a1", "FAILED", "JOB_ENTRYPOINT_COMMAND_ERROR",
                          _jobs.ERROR_LINE_PREFIX + '{"type": "ValueError", "message": "x"}')
    assert isinstance(err, _jobs.JobFailedError)
    err = _jobs.job_error("j-a1", "STOPPED", None, logs)  # stopped: whatever it printed
    assert isinstance(err, _jobs.JobFailedError) and "was stopped" in str(err)
    err = _jobs.job_error("j-a1", "FAILED", "RUNTIME_ENV_SETUP_FAILURE", "pip failed")
    assert isinstance(err, ConfigError) and "run['runtime_env']" in str(err)


def test_results_round_trip_as_the_same_reference_types():
    from tasks.refs import CheckpointRef

    ref = CheckpointRef(uri="/s/runs/r/checkpoint_000001", framework="torch",
                        metrics={"accuracy": 0.9}, run_name="r")
    assert _jobs.decode_result(_jobs.encode_result(ref, "j-a1")) == ref
    assert _jobs.decode_result(_jobs.encode_result({"accuracy": 0.9}, "j-a1")) == {
        "accuracy": 0.9}


def test_log_lines_are_prefixed_and_scrubbed(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    lines = []
    tail = _jobs.LogTail(None, "trainyard-train-r-a1", lines.append)
    tail.feed("first line\nsecond s3cr3t-value li")
    tail.feed("ne\npartial")
    tail.flush()
    assert lines == ["[ray job trainyard-train-r-a1] first line",
                     "[ray job trainyard-train-r-a1] second *** line",
                     "[ray job trainyard-train-r-a1] partial"]


def test_only_an_earlier_attempts_lease_is_waited_for():
    name = "trainyard-train-r"
    assert _earlier_attempt(f"airflow:d/r/t/{name}-a1", name, f"{name}-a2")
    assert not _earlier_attempt(f"{name}-a2", name, f"{name}-a2")
    assert not _earlier_attempt("airflow:d/r/t", name, f"{name}-a2")  # a local driver
