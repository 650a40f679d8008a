"""The ray_job mode's pieces that need no cluster: settings, names, what goes where
(credentials only in the job's env vars), errors mapped back, the log prefix."""

from __future__ import annotations

import pytest

from engine.exceptions import ConfigError
from tasks import ray_jobs as _jobs
from tasks.ray_jobs.entry import _earlier_attempt


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


def test_the_token_comes_from_the_connection_then_rays_own_sources(monkeypatch, tmp_path):
    """The orchestrator's own secret first, then Ray's order: $RAY_AUTH_TOKEN, the file
    $RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token; a token file that cannot be read is a
    ConfigError (as Ray refuses it), and no token at all is a cluster without auth."""
    from tasks.ray_jobs.settings import job_token

    for key in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert job_token() == (None, "")
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("from-home\n")
    assert job_token() == ("from-home", "~/.ray/auth_token")
    path = tmp_path / "token"
    path.write_text("from-path")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))
    assert job_token() == ("from-path", f"$RAY_AUTH_TOKEN_PATH ({path})")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    assert job_token() == ("from-env", "$RAY_AUTH_TOKEN")
    assert job_token("from-connection") == ("from-connection",
                                             "the orchestrator's connection")
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    path.write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        job_token()
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="cannot be read"):
        job_token()


def test_a_deferred_tasks_trigger_stores_the_connection_not_the_token():
    pytest.importorskip("airflow.triggers.base")
    from tasks.airflow.triggers import RayJobTrigger

    path, kwargs = RayJobTrigger("http://head:8265", "trainyard-train-x-a1", 1.0,
                                 conn_id="trainyard_ray").serialize()
    assert path == "tasks.airflow.triggers.RayJobTrigger"
    assert kwargs == {"address": "http://head:8265", "submission_id": "trainyard-train-x-a1",
                      "poll_s": 1.0, "conn_id": "trainyard_ray"}
    assert RayJobTrigger(**kwargs).serialize() == (path, kwargs)


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


class _SlowJobServer:
    """A job server stand-in: the job stays RUNNING; its log ends with the entry's
    result line after ``after_s`` (the result file is written just before)."""

    def __init__(self, result_path: str, after_s: float) -> None:
        self.result_path, self.after_s, self.status_calls = result_path, after_s, 0

    def get_job_status(self, submission_id):
        self.status_calls += 1
        return "RUNNING"

    async def tail_job_logs(self, submission_id):
        import asyncio
        import json

        yield "training...\n"
        await asyncio.sleep(self.after_s)
        with open(self.result_path, "w") as f:
            json.dump({"type": "json", "value": 1}, f)
        yield f"{_jobs.RESULT_LINE_PREFIX}done\n"


def test_the_wait_ends_at_the_result_line_not_at_the_next_poll(tmp_path):
    import time

    job = _jobs.StepJob(step="train", kwargs={}, name="trainyard-train-r",
                        storage=str(tmp_path), address="http://head:8265")
    job._client = _SlowJobServer(job.result_uri("trainyard-train-r-a1"), after_s=0.5)
    (tmp_path / "jobs" / "trainyard-train-r").mkdir(parents=True)
    lines = []
    t0 = time.monotonic()
    status = job.wait("trainyard-train-r-a1", lines.append, poll_s=30.0)
    took = time.monotonic() - t0
    assert status == "SUCCEEDED" and lines[-1].endswith(f"{_jobs.RESULT_LINE_PREFIX}done")
    assert took < 5.0, took  # a 30 s poll interval would have waited until 30 s
    assert job._client.status_calls <= 6  # backs off from 0.1 s instead of spinning


class _EndedJobServer:
    """A job that had SUCCEEDED by the first poll, whose log stream stays open (a busy
    head closes it late); its whole log is there to read."""

    log = f"training...\n{_jobs.RESULT_LINE_PREFIX}done\n"

    def get_job_status(self, submission_id):
        return "SUCCEEDED"

    async def tail_job_logs(self, submission_id):
        import asyncio

        await asyncio.sleep(30)  # nothing comes through the stream in time
        yield ""

    def get_job_logs(self, submission_id):
        return self.log


def test_a_job_seen_succeeded_returns_with_its_whole_log_without_waiting_for_the_stream(
        tmp_path):
    import time

    job = _jobs.StepJob(step="train", kwargs={}, name="trainyard-train-r",
                        storage=str(tmp_path), address="http://head:8265")
    job._client = _EndedJobServer()
    lines = []
    t0 = time.monotonic()
    status = job.wait("trainyard-train-r-a1", lines.append, poll_s=1.0)
    assert status == "SUCCEEDED"
    assert time.monotonic() - t0 < 1.0  # the stream's drain would wait up to 2 s
    assert [ln.split("] ", 1)[1] for ln in lines] == [
        "training...", f"{_jobs.RESULT_LINE_PREFIX}done"]


def test_poll_intervals_start_small_and_grow_to_the_setting():
    import itertools

    got = list(itertools.islice(_jobs.poll_intervals(1.0), 8))
    assert got[0] == 0.1 and got == sorted(got) and got[-1] == 1.0
    assert list(itertools.islice(_jobs.poll_intervals(0.05), 2)) == [0.05, 0.05]


def test_the_last_lines_come_from_the_whole_log_once(monkeypatch):
    lines = []
    tail = _jobs.LogTail(None, "j-a1", lines.append)
    tail.feed("one\ntwo\nthr")  # the stream lags: "three" and the rest not yet
    tail.catch_up(f"one\ntwo\nthree\nfinished after 3 epochs\n{_jobs.RESULT_LINE_PREFIX}x\n")
    tail.feed("ee\nfinished after 3 epochs\n")  # the stream's late copy: dropped
    tail.flush()
    assert [ln.split("] ", 1)[1] for ln in lines] == [
        "one", "two", "three", "finished after 3 epochs", f"{_jobs.RESULT_LINE_PREFIX}x"]
    assert tail.ended


def test_the_step_joins_the_cluster_the_background_connection_is_joining(monkeypatch):
    """A job driver connects in a background thread while it imports; the step's own
    ensure_ray() must wait for that connection, not start a second ray.init()."""
    import threading
    import time

    import ray

    from engine.runtime import ensure_ray

    calls = []
    connected = threading.Event()

    def slow_init(**kwargs):
        calls.append(kwargs)
        time.sleep(0.3)  # Ray's servers answering
        connected.set()

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    monkeypatch.setattr(ray, "is_initialized", connected.is_set)
    monkeypatch.setattr(ray, "init", slow_init)
    background = threading.Thread(target=ensure_ray)
    background.start()
    while not calls:
        time.sleep(0.01)
    ensure_ray()  # the step's call, while the background one is in ray.init()
    background.join()
    assert connected.is_set()
    assert calls == [{"address": "127.0.0.1:6379", "log_to_driver": True}]


def test_only_a_stop_just_after_a_re_attach_is_taken_for_a_cleared_tasks_rerun(tmp_path):
    """The Airflow rerun of a cleared task may re-attach to the job its predecessor's
    trigger is stopping; that STOPPED, seconds after the re-attach, makes the rerun submit
    the next attempt. A stop long after it (``ray job stop`` by hand), one of a job this
    try submitted itself, or another end, still ends the task with the job's outcome."""
    import time
    from types import SimpleNamespace

    from tasks.ray_jobs.submission import RERUN_STOP_WINDOW_S

    job = _jobs.StepJob(step="train", kwargs={}, name="trainyard-train-r",
                        storage=str(tmp_path), address="http://head:8265")
    now = time.time()
    ended = {}

    class Server:
        def get_job_info(self, submission_id):
            return SimpleNamespace(status=ended["status"], end_time=ended["at"] * 1000)

    job._client = Server()
    for status, at, reattached_at, rerun in (
            ("STOPPED", now + 4, now, True),
            ("STOPPED", now + 2 * RERUN_STOP_WINDOW_S, now, False),
            ("STOPPED", now + 4, None, False),
            ("FAILED", now + 4, now, False)):
        ended.update(status=status, at=at)
        assert job.stopped_for_a_rerun("trainyard-train-r-a1", reattached_at) is rerun
