"""The Prefect deployments of ``deploy/prefect.yaml`` under Prefect's real components: a
``prefect server`` (its scheduler, triggers and automations services) and a process
worker, on loopback, with a local HTTP server as the notification webhook.

One server, worker and webhook for the module (they take ~30 s to start); the tests run
in file order and share the deployments' state (the alias, the runs):

1. a manual ``retrain`` run whose gate rejects: ``trainyard.model.rejected``, the
   notifications (flow hook and automation), no scoring run;
2. the one-minute cron schedule starts a ``retrain`` run by itself; it promotes, the
   deployment trigger starts ``batch-predict`` with the promoted checkpoint; task
   results lie under the storage root and a second process reads them;
3. a failing run notifies through the flow hook and the automation.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List

import pytest
import yaml

from tests.conftest import _free_port
from tests.support.prefect_server import prefect, prefect_server, start_worker

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RETRAIN = "retrain/retrain-digits"
PREDICT = "batch-predict/batch-predict-digits"
# Small and fast: one tuning trial of one epoch, two epochs of training.
FAST = {"tune_epochs": 1, "train_epochs": 2, "param_space": {"lr": {"grid_search": [0.01]}},
        "retry_delay_s": 1}


class Webhook:
    """A local HTTP server that records each JSON POST as ``(path, body)``."""

    def __init__(self) -> None:
        self.messages: List[tuple] = []
        self.cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer.cond:
                    outer.messages.append((self.path, json.loads(body or b"null")))
                    outer.cond.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, path: str, match: Callable[[Any], bool], timeout: float) -> List[Any]:
        """The bodies POSTed to ``path`` that ``match``, once there is at least one."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = [b for p, b in self.messages if p == path and match(b)]
                if found or time.monotonic() > deadline:
                    return found
                self.cond.wait(timeout=1)


def _wait(what: str, fn: Callable[[], Any], timeout: float, logs: Any = None) -> Any:
    """Poll ``fn`` until it returns something truthy (a condition, never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(1)
    tail = "" if logs is None else "\n--- worker log ---\n" + logs.read_text()[-6000:]
    pytest.fail(f"timed out after {timeout} s waiting for {what}{tail}")


def _deploy_file(tmp) -> str:
    """``deploy/prefect.yaml`` with the retrain schedule every minute and small training
    parameters (what a user changes for a quick try); everything else as shipped."""
    with open(os.path.join(REPO, "deploy", "prefect.yaml")) as f:
        config = yaml.safe_load(f)
    retrain = next(d for d in config["deployments"] if d["name"] == "retrain-digits")
    assert [s["cron"] for s in retrain["schedules"]] == ["0 3 * * 1"]  # as shipped
    # Inactive until the schedule's own test turns it on: a run it started during another
    # test would promote a model under that test's feet.
    retrain["schedules"] = [{"cron": "* * * * *", "timezone": "UTC", "active": False}]
    retrain["parameters"].update(FAST, gate={"accuracy": ">=0.3"})
    path = tmp / "prefect.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


@pytest.fixture(scope="module")
def stack(ray_session, tmp_path_factory):
    """Server, work pool, deployments, notifications and a worker; the API settings."""
    import ray

    tmp = tmp_path_factory.mktemp("prefect_deployments")
    webhook = Webhook()
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    storage = tmp / "storage"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp / "prefect_home"), PREFECT_API_URL=api,
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_UI_ENABLED="false",
               PREFECT_WORKER_QUERY_SECONDS="2",
               # A scheduled run that waits for the manual one (concurrency_limit: 1)
               # asks again after 5 s, not 30.
               PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS="5",
               # The worker's default result store, which the task results must not use.
               PREFECT_LOCAL_STORAGE_PATH=str(tmp / "worker-default-results"),
               # Flow runs join this session's Ray instead of starting their own.
               RAY_ADDRESS=ray.get_runtime_context().gcs_address,
               TRAINYARD_STORAGE_PATH=str(storage),
               TRAINYARD_NOTIFY_WEBHOOK=f"{webhook.url}/hook",
               PYTHONPATH=os.pathsep.join(p for p in [REPO, env.get("PYTHONPATH")] if p))
    logs = tmp / "logs"
    logs.mkdir()
    try:
        with prefect_server(env, port, tmp, logs) as procs:
            prefect("--no-prompt", "deploy", "--all", "--prefect-file", _deploy_file(tmp),
                    env=env)
            out = subprocess.run(
                [sys.executable, "-m", "tasks.cli", "notifications", "--webhook",
                 f"{webhook.url}/automation"], env=env, cwd=REPO, capture_output=True,
                text=True, timeout=300)  # a hang guard: 120 s was passed under load 15
            assert out.returncode == 0, out.stderr
            procs.append(start_worker(env, tmp, logs))
            yield dict(api=api, storage=storage, webhook=webhook, env=env,
                       worker_log=logs / "worker.log", server_log=logs / "server.log")
    finally:
        webhook.server.shutdown()


# --- helpers over the API -------------------------------------------------------------------
def _client():
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True)


def _deployment_runs(name: str) -> list:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    with _client() as client:
        deployment = client.read_deployment_by_name(name)
        return client.read_flow_runs(deployment_filter=DeploymentFilter(
            id=DeploymentFilterId(any_=[deployment.id])))


def _task_results(flow_run_id, *needed: str) -> Dict[str, Any]:
    """``{task name: its completed state}`` of a flow run, once the ``needed`` tasks have
    one: Prefect 3 clients send task-run states as events, which the server records after
    the flow run itself may already read as completed (a task run is then listed with no
    state yet)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    def completed() -> Dict[str, Any]:
        with _client() as client:
            runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        states = {r.name.rsplit("-", 1)[0]: r.state for r in runs
                  if r.state is not None and r.state.is_completed()}
        return states if all(name in states for name in needed) else {}

    return _wait(f"the completed states of tasks {needed} of flow run {flow_run_id}",
                 completed, 60)


def _events(api: str, name: str) -> list:
    import httpx

    answer = httpx.post(f"{api}/events/filter", json={
        "filter": {"event": {"name": [name]}}, "limit": 50}, timeout=30)
    answer.raise_for_status()
    return answer.json()["events"]


def _final(flow_run_id):
    with _client() as client:
        run = client.read_flow_run(flow_run_id)
    return run if run.state is not None and run.state.is_final() else None


# --- the tests ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_rejected_candidate_emits_rejected_notifies_and_starts_no_scoring(stack):
    from prefect.deployments import run_deployment

    from tasks.refs import Promotion

    run = run_deployment(RETRAIN, timeout=600,
                         parameters={**FAST, "gate": {"accuracy": ">1"}})
    assert run.state.is_completed(), (run.state, stack["worker_log"].read_text()[-6000:])
    decision = _task_results(run.id, "promote")["promote"].result()
    assert isinstance(decision, Promotion) and not decision.promoted
    candidate = decision.checkpoint.uri
    # The event, on the alias's resource, with the gate's reasons.
    events = _wait("the rejected event", lambda: [
        e for e in _events(stack["api"], "trainyard.model.rejected")
        if e["payload"]["checkpoint_uri"] == candidate], 60)
    assert events[0]["resource"]["prefect.resource.id"] == "trainyard.model.digits.production"
    assert any("accuracy" in r and "FAIL" in r for r in events[0]["payload"]["reasons"])
    # The flow's own notification, and the automation's (through the webhook block).
    hook = stack["webhook"].wait_for("/hook", lambda b: b["event"] ==
                                     "trainyard.model.rejected", 60)
    assert len(hook) == 1 and hook[0]["checkpoint_uri"] == candidate
    assert hook[0]["flow_run_id"] == str(run.id) and hook[0]["previous"] is None
    sent = stack["webhook"].wait_for("/automation", lambda b: "rejected" in b["subject"], 120)
    assert len(sent) == 1 and sent[0]["subject"] == \
        "trainyard: digits/production candidate rejected"
    assert candidate in sent[0]["body"] and "FAIL" in sent[0]["body"]
    # The automations service has handled the event: the scoring trigger saw it too.
    assert not [r for r in _deployment_runs(PREDICT)
                if r.parameters.get("checkpoint_uri") == candidate]
    assert not (stack["storage"] / "models" / "digits" / "production.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_schedule_retrains_and_the_promotion_triggers_scoring_with_that_model(stack):
    import pyarrow.parquet as pq

    from tasks.prefect import RESULTS_DIR

    log = stack["worker_log"]

    def started_by_the_schedule() -> list:
        server_log = stack["server_log"].read_text()
        # Prefect 3.7's scheduler with SQLAlchemy 2.1 (see constraints.txt) inserts no run.
        assert "Can't evaluate bulk DML statement" not in server_log, \
            "the server's scheduler cannot insert runs: install SQLAlchemy 2.0 (-c constraints.txt)"
        return sorted((r for r in _deployment_runs(RETRAIN) if r.auto_scheduled and r.state
                       is not None and (r.state.is_running() or r.state.is_final())),
                      key=lambda r: r.expected_start_time)

    with _client() as client:
        deployment = client.read_deployment_by_name(RETRAIN)
        for schedule in deployment.schedules:
            client.update_deployment_schedule(deployment.id, schedule.id, active=True)
    scheduled = _wait("a run that the one-minute schedule started", started_by_the_schedule,
                      240, log)[0]
    with _client() as client:  # no more scheduled runs after this one
        client.pause_deployment(scheduled.deployment_id)
        # Pausing keeps the runs that waited for the manual one's slot: drop them too.
        for other in _deployment_runs(RETRAIN):
            if (other.auto_scheduled and other.id != scheduled.id and other.state is not None
                    and other.state.is_scheduled()):
                client.delete_flow_run(other.id)
    run = _wait("the scheduled run to end", lambda: _final(scheduled.id), 600, log)
    assert run.state.is_completed(), (run.state, log.read_text()[-6000:])
    assert run.parameters["gate"] == {"accuracy": ">=0.3"}  # the deployment's own
    results = _task_results(run.id, "promote", "train")
    decision = results["promote"].result()
    assert decision.promoted
    promoted = decision.checkpoint.uri
    pointer = json.loads((stack["storage"] / "models" / "digits" / "production.json")
                         .read_text())
    assert pointer["checkpoint"]["uri"] == promoted

    # The deployment trigger on trainyard.model.promoted started scoring with it.
    scoring = _wait("the batch-predict run the promotion triggered", lambda: [
        r for r in _deployment_runs(PREDICT)
        if r.parameters.get("checkpoint_uri") == promoted], 120, log)
    assert len(scoring) == 1
    scored_run = _wait("the scoring run to end", lambda: _final(scoring[0].id), 300, log)
    assert scored_run.state.is_completed(), (scored_run.state, log.read_text()[-6000:])
    assert scored_run.parameters["pipeline"] == "digits"
    predictions = _task_results(scored_run.id, "batch_predict")["batch_predict"].result()
    assert predictions.metadata["checkpoint_uri"] == promoted
    table = pq.read_table(predictions.uri)
    assert table.num_rows == predictions.num_rows == 1797
    assert "predicted_label" in table.column_names

    # Task results were written under the storage root, not the worker's default store,
    # and a second process (this one, and a fresh interpreter) reads them back.
    record = results["train"].data  # the result's metadata: its block and key
    with _client() as client:
        block = client.read_block_document(record.storage_block_id)
    assert block.data["basepath"] == str(stack["storage"] / RESULTS_DIR)
    assert (stack["storage"] / RESULTS_DIR / record.storage_key).is_file()
    assert not glob.glob(os.path.join(stack["env"]["PREFECT_LOCAL_STORAGE_PATH"], "*"))
    reader = subprocess.run([sys.executable, "-c", (
        "import sys\n"
        "from prefect.client.orchestration import get_client\n"
        "with get_client(sync_client=True) as c:\n"
        "    runs = c.read_task_runs()\n"
        "train = [r for r in runs if r.flow_run_id and str(r.flow_run_id) == sys.argv[1]"
        " and r.name.startswith('train-')][0]\n"
        "print(train.state.result().uri)\n"), str(run.id)],
        env=dict(stack["env"], PREFECT_LOCAL_STORAGE_PATH=str(stack["storage"] / "elsewhere")),
        capture_output=True, text=True, timeout=120)
    assert reader.returncode == 0, reader.stderr
    assert reader.stdout.strip().splitlines()[-1] == results["train"].result().uri


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_failed_run_notifies_through_the_hook_and_the_automation(stack):
    from prefect.deployments import run_deployment

    run = run_deployment(PREDICT, timeout=300, parameters={"pipeline": "no-such-pipeline"})
    assert run.state.is_failed()
    hook = stack["webhook"].wait_for("/hook", lambda b: b.get("flow_run_id") == str(run.id),
                                     60)
    assert len(hook) == 1 and hook[0]["event"] == "trainyard.flow_run.failed"
    assert hook[0]["flow"] == "batch-predict" and "no-such-pipeline" in hook[0]["message"]
    sent = stack["webhook"].wait_for("/automation", lambda b: run.name in b["subject"], 120)
    assert len(sent) == 1
    assert sent[0]["subject"] == f"trainyard: batch-predict run {run.name} Failed"
    assert "no-such-pipeline" in sent[0]["body"]
