"""Execution mode ``ray_job`` against a real Ray cluster (``ray start --head`` with its
dashboard and job server, its own process group), storage on a local shared path.

The orchestrator's task process is a subprocess (tests/support/ray_job_orchestrator.py), so it
can be SIGKILLed and checked for what it imported: it never starts Ray nor imports torch.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.support.ray_job_cluster import HEAD_MODULE_TIMEOUT_S

ORCHESTRATOR = os.path.join(REPO, "tests", "support", "ray_job_orchestrator.py")

# The module's first test also waits for the cluster fixture (ray_job_cluster).
pytestmark = pytest.mark.timeout(HEAD_MODULE_TIMEOUT_S)


def _env(head, storage: str, mode: str = "ray_job", **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_ADDRESS", "TRAINYARD_"))}
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(key, None)
    # The cluster's token as Ray's own clients read it (the job server has token
    # authentication on, Ray's default); a local-mode driver joins with it too.
    env.update(PYTHONPATH=REPO, TRAINYARD_EXECUTION=mode, TRAINYARD_STORAGE_PATH=storage,
               TRAINYARD_RAY_JOB_ADDRESS=head.address, TRAINYARD_RAY_JOB_POLL_S="0.5",
               TRAINYARD_RUN_LEASE_S="10")
    if head.token:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=head.token)
    else:  # a cluster without auth: and no token anywhere here either
        env.update(RAY_AUTH_MODE="disabled", HOME=storage + "-home")
    if mode == "local":  # this process is the Ray driver, on the same cluster
        env["RAY_ADDRESS"] = head.gcs_address
    env.update(extra)
    return env


def _orchestrate(tmp_path, head, storage, run_name, epochs, *steps, mode="ray_job",
                 name="out", **extra) -> subprocess.Popen:
    out = str(tmp_path / f"{name}.json")
    log = open(tmp_path / f"{name}.log", "w")
    return subprocess.Popen([sys.executable, ORCHESTRATOR, out, storage, run_name,
                             str(epochs), *steps], env=_env(head, storage, mode, **extra),
                            stdout=log, stderr=subprocess.STDOUT, cwd=str(tmp_path))


def _finish(proc, tmp_path, name="out", timeout=600) -> dict:
    proc.wait(timeout=timeout)
    log = (tmp_path / f"{name}.log").read_text()
    assert proc.returncode == 0, log[-6000:]
    with open(tmp_path / f"{name}.json") as f:
        return json.load(f), log


def _jobs_of(head, run_name):
    client = head.client()
    return sorted((j for j in client.list_jobs() if run_name in (j.submission_id or "")),
                  key=lambda j: j.submission_id)


def _record(storage, run_name) -> dict:
    with open(os.path.join(storage, "runs", run_name, "run_state.json")) as f:
        return json.load(f)


def _wait_for_checkpoints(storage, run_name, n, proc, timeout=300) -> None:
    deadline = time.monotonic() + timeout
    pattern = os.path.join(storage, "runs", run_name, "checkpoint_*", ".trainyard_committed")
    while len(glob.glob(pattern)) < n:
        assert proc.poll() is None, "the orchestrator exited early"
        assert time.monotonic() < deadline, f"no {n} committed checkpoints in {timeout} s"
        time.sleep(0.3)


def test_train_as_a_ray_job_returns_the_same_checkpoint_as_local(head, tmp_path):
    storage = str(tmp_path / "storage")
    job = _orchestrate(tmp_path, head, storage, "rj-digits", 2, "evaluate",
                       "batch_predict", name="job")
    ref, log = _finish(job, tmp_path, "job")
    assert ref["checkpoint_type"] == "CheckpointRef" and ref["predictions_type"] == "DatasetRef"
    # The orchestrator only submitted and polled.
    assert ref["torch_imported"] is False and ref["ray_initialized"] is False
    ckpt = ref["checkpoint"]
    assert ckpt["run_name"] == "rj-digits" and os.path.isdir(ckpt["uri"])
    assert ckpt["uri"].startswith(os.path.join(storage, "runs", "rj-digits"))
    assert ref["metrics"]["checkpoint_uri"] == ckpt["uri"]
    assert ref["predictions"]["num_rows"] == ref["metrics"]["num_rows"]
    # The job's log streamed into the task's log, prefixed with the job.
    assert "[ray job trainyard-train-rj-digits-a1]" in log
    assert "rj-digits" in log and "finished after" in log
    jobs = _jobs_of(head, "rj-digits")
    assert [(j.submission_id, str(j.status)) for j in jobs] == [
        ("trainyard-train-rj-digits-a1", "SUCCEEDED")]
    for job_info in jobs:  # nothing secret or large in what Ray shows
        assert job_info.entrypoint == "python -m tasks.ray_jobs.entry trainyard-train-rj-digits"

    local = _orchestrate(tmp_path, head, storage, "local-digits", 2, "evaluate",
                         mode="local", name="local")
    same, _ = _finish(local, tmp_path, "local")
    assert same["ray_initialized"] is True  # local mode: this process is the driver
    assert same["checkpoint"]["metrics"]["weights_checksum"] == \
        ckpt["metrics"]["weights_checksum"]
    assert same["metrics"]["accuracy"] == ref["metrics"]["accuracy"]


def test_a_ray_job_steps_workers_run_on_a_second_node_of_a_cluster_without_auth(tmp_path):
    """A cluster run without token authentication (``RAY_AUTH_MODE=disabled``), and a
    second node joined to it with ``ray start --address`` that offers a resource only it
    has: a step whose workers ask for it trains there (its worker process runs under
    that node's raylet), and its checkpoint is in the shared storage like any other."""
    import psutil

    from tests.support.ray_job_cluster import RayHead, RayNode

    head = RayHead(num_cpus=1, auth=False, env={
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])})
    node = None
    try:
        head.wait_ready()
        node = RayNode(head, num_cpus=1, resources={"second_node": 1})
        node.wait_ready()
        storage = str(tmp_path / "storage")
        job = _orchestrate(tmp_path, head, storage, "rj-node", 2, name="node",
                           EPOCH_DELAY="1.0",
                           TY_SCALING=json.dumps({"num_workers": 1, "resources_per_worker":
                                                  {"CPU": 1, "second_node": 1}}))
        seen = set()
        while job.poll() is None:  # the worker's process, while it trains
            for proc in psutil.Process(node.proc.pid).children(recursive=True):
                try:
                    if "TrainWorker" in " ".join(proc.cmdline()):
                        seen.add(proc.pid)
                except psutil.Error:
                    pass
            time.sleep(0.2)
        ref, _log = _finish(job, tmp_path, "node")
        assert seen, "no training worker ran on the second node"
        assert os.path.isdir(ref["checkpoint"]["uri"])
        assert ref["checkpoint"]["metrics"]["epoch"] == 1
    finally:
        if node is not None:
            node.stop()
        head.stop()


@pytest.mark.parametrize("case", ["no_token", "wrong_token"])
def test_a_missing_or_wrong_token_is_one_clear_error(case, head, tmp_path, monkeypatch):
    """Against a job server with token authentication (Ray's default): no token found,
    or one it refuses, is a ConfigError that says where the token goes, before anything
    is written, and shows no token."""
    from engine.exceptions import ConfigError
    from tasks import steps as core

    storage = str(tmp_path / "storage")
    monkeypatch.setenv("TRAINYARD_RAY_JOB_ADDRESS", head.address)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.ray/auth_token either
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    if case == "wrong_token":
        wrong = tmp_path / "token"
        wrong.write_text("not-the-clusters-token\n")
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(wrong))
    with pytest.raises(ConfigError) as info:
        core.train("digits", _refs(storage), {"num_workers": 1},
                   {"execution": "ray_job", "name": "auth", "storage": storage})
    message = str(info.value)
    assert (f"refused the token from $RAY_AUTH_TOKEN_PATH ({tmp_path / 'token'})"
            if case == "wrong_token" else "requires a token") in message, message
    for where in ("ray get-auth-token", "$RAY_AUTH_TOKEN", "~/.ray/auth_token",
                  "Airflow connection", "TRAINYARD_PREFECT_RAY_TOKEN_BLOCK"):
        assert where in message, message
    assert "not-the-clusters-token" not in message and head.token not in message
    assert not os.path.exists(storage)


def test_a_killed_task_re_attaches_to_its_running_job(head, tmp_path):
    storage = str(tmp_path / "storage")
    first = _orchestrate(tmp_path, head, storage, "rj-kill", 5, name="first",
                         EPOCH_DELAY="1.0")
    _wait_for_checkpoints(storage, "rj-kill", 1, first)
    first.send_signal(signal.SIGKILL)  # the Airflow/Prefect worker dies
    first.wait()
    assert [str(j.status) for j in _jobs_of(head, "rj-kill")] == ["RUNNING"]
    retry = _orchestrate(tmp_path, head, storage, "rj-kill", 5, name="retry",
                         EPOCH_DELAY="1.0")
    ref, log = _finish(retry, tmp_path, "retry")
    jobs = _jobs_of(head, "rj-kill")
    assert [(j.submission_id, str(j.status)) for j in jobs] == [
        ("trainyard-train-rj-kill-a1", "SUCCEEDED")]
    assert "Re-attaching to Ray job trainyard-train-rj-kill-a1" in log
    record = _record(storage, "rj-kill")
    assert record["state"] == "FINISHED" and record.get("restores", 0) == 0
    assert ref["checkpoint"]["metrics"]["epoch"] == 4


def test_ctrl_c_of_the_caller_stops_its_job(head, tmp_path):
    """A user's Ctrl-C (SIGINT) of the script waiting on a ray_job step stops the Ray
    job: ``STOPPED`` within 30 s, its driver gone; a SIGKILL (above) does not."""
    storage = str(tmp_path / "storage")
    # RAY_ADDRESS names another cluster (as on a worker whose local-mode tasks join
    # one): Ray's client would take it over the job server's address; ours does not.
    caller = _orchestrate(tmp_path, head, storage, "rj-int", 30, name="int",
                          EPOCH_DELAY="1.0", RAY_ADDRESS="127.0.0.1:9")
    _wait_for_checkpoints(storage, "rj-int", 1, caller)
    caller.send_signal(signal.SIGINT)
    interrupted = time.monotonic()
    caller.wait(timeout=120)
    log = (tmp_path / "int.log").read_text()
    assert caller.returncode != 0, log[-4000:]
    assert "Stopped Ray job trainyard-train-rj-int-a1 (the task was cancelled)" in log
    client = head.client()
    while str(client.get_job_status("trainyard-train-rj-int-a1")) != "STOPPED":
        assert time.monotonic() - interrupted < 30, client.get_job_info(
            "trainyard-train-rj-int-a1")
        time.sleep(0.2)
    stopped_s = time.monotonic() - interrupted
    info = client.get_job_info("trainyard-train-rj-int-a1")
    if info.driver_info is not None:  # and its driver (the step's process) has exited
        while psutil_alive(int(info.driver_info.pid)):
            assert time.monotonic() - interrupted < 30, "the job's driver is still running"
            time.sleep(0.2)
    print(f"Ctrl-C to STOPPED: {stopped_s:.1f} s")


def psutil_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_stopped_job_is_resubmitted_and_resumes(head, tmp_path):
    storage = str(tmp_path / "storage")
    first = _orchestrate(tmp_path, head, storage, "rj-stop", 5, name="first",
                         EPOCH_DELAY="1.0")
    _wait_for_checkpoints(storage, "rj-stop", 2, first)
    head.client().stop_job("trainyard-train-rj-stop-a1")
    first.wait(timeout=120)
    log = (tmp_path / "first.log").read_text()
    assert first.returncode != 0 and "JobFailedError" in log and "was stopped" in log
    # The retry trains the same config (a run is its config), the rest of the epochs.
    retry = _orchestrate(tmp_path, head, storage, "rj-stop", 5, name="retry",
                         EPOCH_DELAY="1.0")
    ref, log = _finish(retry, tmp_path, "retry")
    jobs = _jobs_of(head, "rj-stop")
    assert [(j.submission_id, str(j.status)) for j in jobs] == [
        ("trainyard-train-rj-stop-a1", "STOPPED"), ("trainyard-train-rj-stop-a2", "SUCCEEDED")]
    record = _record(storage, "rj-stop")
    assert record["state"] == "FINISHED" and record["restores"] == 1
    assert [row["epoch"] for row in record["history"]] == list(range(5))  # no epoch twice
    assert record["history"][-1]["iterations_since_restore"] < 5
    assert ref["checkpoint"]["metrics"]["epoch"] == 4


# --- bad input: clear errors before anything is written --------------------------------
@pytest.fixture
def head_without_dashboard():
    """A real Ray head started without its dashboard, so without a job server: where a
    user would point ``TRAINYARD_RAY_JOB_ADDRESS`` (its dashboard port) nothing serves."""
    from tests.support.ray_job_cluster import RayHead

    cluster = RayHead(num_cpus=1, include_dashboard=False)
    try:
        yield cluster.wait_ready()
    finally:
        cluster.stop()


def _refs(storage):
    from tasks.refs import DatasetRef

    ref = DatasetRef(uri=os.path.join(storage, "datasets", "d"), format="parquet",
                     num_rows=10, schema={"x": "double", "target": "int64"},
                     fingerprint="f" * 64)
    return {"train": ref, "validation": ref}


@pytest.mark.parametrize("case", ["unreachable", "no_dashboard", "memory", "no_address"])
def test_bad_job_settings_fail_before_anything_is_written(case, tmp_path, monkeypatch,
                                                          request):
    from engine.exceptions import ConfigError
    from tasks import steps as core

    storage = str(tmp_path / "storage")
    address = {"unreachable": "http://127.0.0.1:9", "memory": "http://127.0.0.1:9",
               "no_address": ""}.get(case)
    if case == "no_dashboard":
        address = request.getfixturevalue("head_without_dashboard").address
    monkeypatch.setenv("TRAINYARD_RAY_JOB_ADDRESS", address)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    run = {"execution": "ray_job", "name": "bad",
           "storage": "memory://ty-test" if case == "memory" else storage}
    with pytest.raises(ConfigError) as info:
        core.train("digits", _refs(storage), {"num_workers": 1}, run)
    fix = {"unreachable": "TRAINYARD_RAY_JOB_ADDRESS", "no_dashboard": "ray start --head",
           "memory": "s3://", "no_address": "TRAINYARD_RAY_JOB_ADDRESS"}[case]
    assert fix in str(info.value)
    assert not os.path.exists(storage) and not os.path.exists(
        "/dev/shm/trainyard-memory/ty-test")


def test_a_runtime_env_that_cannot_install_is_a_config_error(head, tmp_path, monkeypatch):
    from engine.exceptions import ConfigError
    from tasks import steps as core

    storage = str(tmp_path / "storage")
    for key, value in _env(head, storage).items():
        if key.startswith("TRAINYARD_") or key == "RAY_AUTH_TOKEN":
            monkeypatch.setenv(key, value)
    # A working_dir package the cluster cannot fetch: it fails in the job's runtime_env
    # set-up as a pip requirement would, without Ray first cloning a virtualenv (minutes).
    run = {"name": "rj-badenv", "storage": storage,
           "runtime_env": {"working_dir": "https://127.0.0.1:9/no-such-trainyard-pkg.zip"}}
    with pytest.raises(ConfigError, match=r"runtime_env"):
        core.train("digits", _refs(storage), {"num_workers": 1}, run)
    assert not os.path.exists(os.path.join(storage, "runs"))


# --- the Prefect deployment in ray_job mode ---------------------------------------------
AUDIT_HOOK = '''
import atexit, json, os, sys
_state = {"torch": False}
def _hook(event, args):
    if event == "import" and args and str(args[0]).split(".")[0] == "torch":
        _state["torch"] = True
sys.addaudithook(_hook)
def _dump():
    if os.environ.get("PREFECT__FLOW_RUN_ID"):
        path = os.path.join(os.environ["TY_AUDIT_DIR"], f"{os.getpid()}.json")
        with open(path + ".tmp", "w") as f:
            json.dump({"pid": os.getpid(), "argv": sys.argv,
                       "flow_run_id": os.environ["PREFECT__FLOW_RUN_ID"], **_state}, f)
        os.replace(path + ".tmp", path)  # the test polls for it
atexit.register(_dump)
'''


def _audit_records(audit, flow_run_id, wait_s: float) -> list:
    """The audit records the flow run's process wrote at its exit, once there is one
    (or ``wait_s`` passed)."""
    deadline = time.monotonic() + wait_s
    while True:
        records = [r for r in (json.loads(p.read_text()) for p in audit.glob("*.json"))
                   if r["flow_run_id"] == str(flow_run_id)]
        if records or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_retrain_deployment_in_ray_job_mode(head, tmp_path):
    """prefect server, prefect deploy, a process worker, run_deployment of
    retrain-digits-ray-job: the flow run's process submits Ray jobs and never imports
    torch nor connects to Ray as a driver; the promoted checkpoint scores as it does
    when evaluated in local mode."""
    from prefect.deployments import run_deployment
    from tests.conftest import _free_port
    from tests.support.prefect_server import prefect, prefect_server, start_worker

    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    storage, audit, hooks = tmp_path / "storage", tmp_path / "audit", tmp_path / "hooks"
    audit.mkdir()
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(AUDIT_HOOK)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "TRAINYARD_", "RAY_ADDRESS"))}
    env.update(PREFECT_HOME=str(tmp_path / "prefect_home"), PREFECT_API_URL=api,
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_UI_ENABLED="false",
               RAY_ADDRESS=head.address, TRAINYARD_PREFECT_RAY_TOKEN_BLOCK="ray-token",
               TRAINYARD_STORAGE_PATH=str(storage), TY_AUDIT_DIR=str(audit),
               PYTHONPATH=os.pathsep.join([str(hooks), REPO]))
    logs = tmp_path / "logs"
    logs.mkdir()
    with prefect_server(env, port, tmp_path, logs) as procs:
        prefect("--no-prompt", "deploy", "--all", "--prefect-file", "deploy/prefect.yaml",
                env=env, timeout=240)
        # The cluster's token, kept as a Prefect secret (its only way to the flow runs).
        subprocess.run([sys.executable, "-c", "import os; from prefect.blocks.system import "
                        "Secret; Secret(value=os.environ.pop('TY_TOKEN')).save('ray-token')"],
                       env={**env, "TY_TOKEN": head.token}, check=True, timeout=120)
        procs.append(start_worker(env, tmp_path, logs))
        flow_run = run_deployment(
            "retrain/retrain-digits-ray-job", timeout=780,
            parameters={"tune_epochs": 1, "train_epochs": 2, "num_workers": 1,
                        "param_space": {"lr": {"grid_search": [0.005]}},
                        "gate": {"accuracy": ">=0.3"}})
        # The API says Completed before the flow run's process has exited (it still
        # sends its logs and runs its exit handlers); stopping the worker now could end
        # it before its audit record is written.
        records = _audit_records(audit, flow_run.id, wait_s=120)
        cancelled = _cancel_while_training(head, env)
    worker_log = (logs / "worker.log").read_text()
    assert flow_run.state is not None and flow_run.state.is_completed(), \
        f"{flow_run.state}\n--- worker log ---\n{worker_log[-6000:]}"
    assert head.token not in worker_log and head.token not in json.dumps(
        flow_run.parameters)  # the token: read from the block, never logged
    # The steps ran as Ray jobs; the flow run's process only waited.
    jobs = head.client().list_jobs()
    ours = [j for j in jobs if (j.metadata or {}).get("trainyard_orchestrator_run")
            == f"prefect:{flow_run.id}"]
    assert {j.metadata["trainyard_step"] for j in ours} == {
        "tune", "train", "evaluate", "batch_predict"}, [j.submission_id for j in ours]
    assert all(str(j.status) == "SUCCEEDED" for j in ours)
    # This flow run's process only: the promotion also triggers a run of the local-mode
    # batch-predict-digits deployment, which may start before the worker stops.
    assert len(records) == 1, "the flow run's process left no audit record"
    flow_pids = {r["pid"] for r in records}
    assert all(r["torch"] is False for r in records), records
    direct_drivers = {j.driver_info.pid for j in jobs if str(j.type) == "DRIVER"
                      and j.driver_info is not None}
    assert not flow_pids & {int(p) for p in direct_drivers}, "the flow run called ray.init()"
    # A user's cancel of a flow run (`prefect flow-run cancel`) stopped its Ray job.
    assert cancelled["status"] == "STOPPED" and cancelled["seconds"] < 30, cancelled
    assert cancelled["state"] in ("CANCELLED", "CANCELLING"), cancelled
    print(f"flow run cancelled to STOPPED: {cancelled['seconds']:.1f} s")
    # Promoted, and it scores the same in local mode.
    pointer = json.loads((storage / "models" / "digits" / "production.json").read_text())
    assert pointer["decision"] == "promoted"
    from tasks import steps as core

    ckpt = pointer["checkpoint"]
    evaluated = glob.glob(os.path.join(ckpt["run_uri"], "evaluations", "*", "metrics.json"))
    assert len(evaluated) == 1, evaluated
    in_job = json.load(open(evaluated[0]))
    splits = core.split(core.ingest("sklearn:digits", storage=str(storage)), 0.2, 0, "target")
    assert splits["validation"].fingerprint == in_job["dataset_fingerprint"]
    here = core.evaluate(ckpt, splits["validation"], output_dir=str(tmp_path / "eval"),
                         execution="local")
    assert here["accuracy"] == in_job["accuracy"] and here["log_loss"] == in_job["log_loss"]


def _cancel_while_training(head, env: dict) -> dict:
    """Run the deployment again with long epochs, and once its train step's Ray job runs,
    cancel the flow run as a user does (``prefect flow-run cancel``): how long until the
    job is STOPPED, and the flow run's final state."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    from tests.support.prefect_server import prefect

    flow_run = run_deployment(
        "retrain/retrain-digits-ray-job", timeout=0,
        parameters={"tune_epochs": 1, "train_epochs": 30, "num_workers": 1,
                    "param_space": {"lr": {"grid_search": [0.005]}},
                    "train_config": {"epoch_delay_s": 2.0}, "gate": {"accuracy": ">=0.3"}})
    owner = f"prefect:{flow_run.id}"
    client = head.client()

    def train_job():
        return next((j for j in client.list_jobs()
                     if (j.metadata or {}).get("trainyard_orchestrator_run") == owner
                     and (j.metadata or {}).get("trainyard_step") == "train"
                     and str(j.status) == "RUNNING"), None)

    deadline = time.monotonic() + 600
    while (job := train_job()) is None:
        assert time.monotonic() < deadline, "the second flow run's train job never ran"
        time.sleep(0.5)
    prefect("flow-run", "cancel", str(flow_run.id), env=env)
    cancelled_at = time.monotonic()
    while str(client.get_job_status(job.submission_id)) != "STOPPED":
        if time.monotonic() - cancelled_at > 60:
            break
        time.sleep(0.2)
    seconds = time.monotonic() - cancelled_at
    status = str(client.get_job_status(job.submission_id))
    with get_client(sync_client=True) as api:
        state = api.read_flow_run(flow_run.id).state.type.value
    return {"status": status, "seconds": seconds, "state": state}


def test_train_as_a_ray_job_on_s3_storage(head, tmp_path, s3_server, s3_storage_path):
    """Storage on the S3-compatible server: the job reaches it with the credentials the
    orchestrator forwards as job env vars; they show nowhere Ray lists jobs, nor in the
    task's log."""
    from tests.conftest import FAKE_AWS_SECRET

    job = _orchestrate(tmp_path, head, s3_storage_path, "rj-s3", 2, "evaluate", name="s3")
    ref, log = _finish(job, tmp_path, "s3")
    ckpt = ref["checkpoint"]
    assert ckpt["uri"].startswith(f"s3://{s3_server.bucket}/") and "?" not in ckpt["uri"]
    assert ref["torch_imported"] is False and ref["ray_initialized"] is False
    assert ref["metrics"]["checkpoint_uri"] == ckpt["uri"]
    prefix = s3_storage_path.split("?", 1)[0].split("/", 3)[3]
    keys = s3_server.keys(prefix)
    assert f"{prefix}/runs/rj-s3/run_state.json" in keys
    assert any(k.startswith(f"{prefix}/jobs/trainyard-train-rj-s3/") for k in keys)
    info = head.client().get_job_info("trainyard-train-rj-s3-a1")
    assert FAKE_AWS_SECRET not in info.entrypoint + json.dumps(info.metadata or {})
    # Every process that did its work on S3 exited 0: this task process (above) and
    # each step's job driver (pyarrow's S3 client once crashed processes at their exit,
    # apache/arrow#38352, and a step that exits 139 after its work is retried).
    names = {k.split("/jobs/", 1)[1].split("/", 1)[0] for k in keys if "/jobs/" in k}
    jobs = [j for j in head.client().list_jobs()
            if (j.submission_id or "").rsplit("-a", 1)[0] in names]
    assert sorted(j.metadata["trainyard_step"] for j in jobs) == ["evaluate", "train"]
    assert [(str(j.status), j.driver_exit_code) for j in jobs] == [("SUCCEEDED", 0)] * 2
    assert FAKE_AWS_SECRET not in log
    request = s3_server.client().get_object(
        Bucket=s3_server.bucket, Key=f"{prefix}/jobs/trainyard-train-rj-s3/request.json")
    assert s3_server.endpoint not in request["Body"].read().decode()


OWN_PIPELINE = os.path.join(REPO, "examples", "own_pipeline")


def test_a_plugin_pipeline_from_the_environment_is_shipped_to_its_jobs(head, tmp_path):
    """examples/own_pipeline on this process's path only (TRAINYARD_PIPELINES): the
    train and evaluate jobs get its package (with the CSV it ships) as py_modules and
    the variable in their env_vars; the cluster itself does not have it."""
    storage = str(tmp_path / "storage")
    data = os.path.join(OWN_PIPELINE, "own_pipeline", "data", "churn.csv")
    job = _orchestrate(
        tmp_path, head, storage, "rj-churn", 1, "evaluate", name="churn",
        PYTHONPATH=os.pathsep.join([REPO, OWN_PIPELINE]),
        TRAINYARD_PIPELINES="churn_xgboost=own_pipeline.churn:XGBOOST",
        TY_PIPELINE="churn_xgboost", TY_SOURCE=data, TY_LABEL="churned",
        TY_CONFIG=json.dumps({"num_boost_round": 5, "seed": 0}))
    ref, log = _finish(job, tmp_path, "churn")
    assert ref["checkpoint"]["run_name"] == "rj-churn"
    assert ref["checkpoint"]["pipeline"] == "churn_xgboost"
    assert ref["metrics"]["accuracy"] >= 0.7  # the example's gate
    package = os.path.realpath(os.path.join(OWN_PIPELINE, "own_pipeline"))
    assert f"Shipping pipeline churn_xgboost to the Ray job: py_modules {package}" in log
    client = head.client()
    jobs = [j for j in client.list_jobs()
            if "churn_xgboost" in json.dumps((j.runtime_env or {}).get("env_vars", {}))]
    assert sorted(j.metadata["trainyard_step"] for j in jobs) == ["evaluate", "train"]
    for info in jobs:
        assert str(info.status) == "SUCCEEDED"
        assert [m.startswith("gcs://") for m in info.runtime_env["py_modules"]] == [True]
        assert info.runtime_env["env_vars"]["TRAINYARD_PIPELINES"] == \
            "churn_xgboost=own_pipeline.churn:XGBOOST"
