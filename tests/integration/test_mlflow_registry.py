"""Promotion into a real MLflow model registry (a tracking store on SQLite), no Ray.

The checkpoints are references (the registry never opens them); a champion's metrics on
the data come from its cached evaluation, where ``evaluate`` keeps them.
"""

from __future__ import annotations

import json
import os
import socket

import pytest

from engine import constants
from tasks import registry as _registry
from tasks import steps as core
from tasks.refs import CheckpointRef

pytest.importorskip("mlflow")

FP = "e" * 64


@pytest.fixture(autouse=True)
def _mlflow_env(monkeypatch):
    """No telemetry (offline machines), and the session id MLflow puts into the process
    environment the first time it starts taken back out after each test."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("_MLFLOW_TELEMETRY_SESSION_ID", "")
    monkeypatch.delenv("_MLFLOW_TELEMETRY_SESSION_ID")


@pytest.fixture
def tracking_uri(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/mlflow.db"


def _ckpt(tmp_path, name: str) -> CheckpointRef:
    run = tmp_path / "runs" / "digits-train-flowrun"
    return CheckpointRef(uri=str(run / name), framework="torch", pipeline="digits",
                         run_uri=str(run), run_name="digits-train-flowrun",
                         storage=str(tmp_path))


def _metrics(ckpt: CheckpointRef, accuracy: float) -> dict:
    return {"accuracy": accuracy, "log_loss": 1 - accuracy, "checkpoint_uri": ckpt.uri,
            "dataset_fingerprint": FP}


def _evaluated(ckpt: CheckpointRef, accuracy: float) -> None:
    """Keep metrics where ``evaluate`` keeps them for ``ckpt`` on the data ``FP``."""
    path = os.path.join(ckpt.run_uri, "evaluations",
                        f"{os.path.basename(ckpt.uri)}-{FP[:12]}", "metrics.json")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        json.dump(_metrics(ckpt, accuracy), f)


def test_promotion_moves_the_mlflow_alias_and_tags_the_version(tmp_path, tracking_uri,
                                                               monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.setenv(constants.REGISTRY_ENV_VAR, f"mlflow:{tracking_uri}")
    champ = _ckpt(tmp_path, "checkpoint_000001")
    decision = core.promote(champ, _metrics(champ, 0.95), run_id="flow-run-1")
    assert decision.promoted and decision.pointer_uri == "models:/digits@production"
    client = MlflowClient(tracking_uri=tracking_uri)
    version = client.get_model_version_by_alias("digits", "production")
    assert version.source == champ.uri
    tags = version.tags
    assert json.loads(tags["trainyard.metrics"])["accuracy"] == 0.95
    assert json.loads(tags["trainyard.gate_reasons"]) == [
        "accuracy 0.95 >= 0.9: pass", "accuracy 0.95 >= champion: pass (no champion yet)"]
    assert tags["trainyard.data_fingerprint"] == FP
    assert tags["trainyard.engine_run"] == "digits-train-flowrun"
    assert tags["trainyard.run_id"] == "flow-run-1"
    assert "rejected" not in tags
    # Batch prediction resolves the alias through the same setting.
    assert core.resolve_alias("digits") == champ
    assert not (tmp_path / "models").exists()  # no pointer files beside the registry


def test_a_rejected_candidate_is_tagged_and_does_not_move_the_alias(tmp_path, tracking_uri):
    from mlflow import MlflowClient

    registry = f"mlflow:{tracking_uri}"
    champ, cand = _ckpt(tmp_path, "checkpoint_000001"), _ckpt(tmp_path, "checkpoint_000002")
    assert core.promote(champ, _metrics(champ, 0.95), registry=registry).promoted
    _evaluated(champ, 0.95)
    rejected = core.promote(cand, _metrics(cand, 0.93), registry=registry)  # >= champion
    assert not rejected.promoted and rejected.previous == champ
    client = MlflowClient(tracking_uri=tracking_uri)
    assert client.get_model_version_by_alias("digits", "production").source == champ.uri
    version = client.get_model_version("digits", rejected.entry_uri.rsplit("/", 1)[1])
    assert version.source == cand.uri
    assert version.tags["rejected"].startswith("production: accuracy 0.93 >= champion: FAIL")
    assert json.loads(version.tags["trainyard.champion_metrics"])["accuracy"] == 0.95
    assert core.resolve_alias("digits", registry=registry) == champ
    assert [h["decision"] for h in core.alias_history("digits", registry=registry)] == [
        "promoted", "rejected"]
    # A decision made against a champion that no longer holds the alias (it read the
    # alias before another promoter moved it) does not move it, and says so.
    from tasks.registry import AliasMovedError, decide, open_registry

    late = _ckpt(tmp_path, "checkpoint_000003")
    with pytest.raises(AliasMovedError, match="moved from nothing to"):
        decide(late, _metrics(late, 0.99), "production", {}, open_registry(registry, None),
               previous=None)
    assert client.get_model_version_by_alias("digits", "production").source == champ.uri
    assert [h["decision"] for h in core.alias_history("digits", registry=registry)] == [
        "promoted", "rejected", "superseded"]


def test_a_registry_failure_leaves_the_alias_and_a_retry_promotes_once(tmp_path,
                                                                       tracking_uri,
                                                                       monkeypatch):
    from mlflow import MlflowClient

    registry = f"mlflow:{tracking_uri}"
    champ, cand = _ckpt(tmp_path, "checkpoint_000001"), _ckpt(tmp_path, "checkpoint_000002")
    core.promote(champ, _metrics(champ, 0.95), gate={}, registry=registry)
    real = MlflowClient.set_registered_model_alias
    failures = []

    def flaky(self, name, alias, version):
        if not failures:  # the connection drops once, after the version was created
            failures.append(version)
            raise ConnectionError("connection reset by peer")
        return real(self, name, alias, version)

    monkeypatch.setattr(MlflowClient, "set_registered_model_alias", flaky)
    with pytest.raises(_registry.RegistryError, match="TRAINYARD_REGISTRY.*did not move"):
        core.promote(cand, _metrics(cand, 0.97), gate={}, registry=registry)
    client = MlflowClient(tracking_uri=tracking_uri)
    assert client.get_model_version_by_alias("digits", "production").source == champ.uri
    retried = core.promote(cand, _metrics(cand, 0.97), gate={}, registry=registry)
    assert retried.promoted and failures
    assert client.get_model_version_by_alias("digits", "production").source == cand.uri
    versions = client.search_model_versions("name = 'digits'")
    assert sorted(v.source for v in versions) == [champ.uri, cand.uri]  # no duplicate


def test_an_unreachable_registry_is_a_clear_error(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    cand = _ckpt(tmp_path, "checkpoint_000001")
    with pytest.raises(_registry.RegistryError, match=rf"127\.0\.0\.1:{port}.*reachable"):
        core.promote(cand, _metrics(cand, 0.95), gate={},
                     registry=f"mlflow:http://127.0.0.1:{port}")
    with pytest.raises(Exception, match="tracking URI"):
        core.promote(cand, _metrics(cand, 0.95), gate={}, registry="mlflow:")


@pytest.fixture
def mlflow_server(tmp_path):
    """``mlflow server`` on a free port (SQLite behind it), stopped after the test."""
    import subprocess
    import sys
    import time
    import urllib.request

    from tests.conftest import _free_port

    port = _free_port()  # not port 0: see "Ports" in tests/README.md
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port",
           str(port), "--workers", "1", "--backend-store-uri",
           f"sqlite:///{tmp_path}/server.db", "--default-artifact-root", str(tmp_path / "art")]
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        # A hang guard: under a load of 20 (CI46) its start took more than 120 s.
        deadline = time.time() + 300
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"mlflow server did not start: "
                                f"{(tmp_path / 'server.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, 15)  # the server and its uvicorn worker
        proc.wait(timeout=30)


def test_an_mlflow_server_registers_shared_checkpoints_and_refuses_local_paths(
        tmp_path, mlflow_server):
    from mlflow import MlflowClient

    from engine.exceptions import ConfigError

    registry = f"mlflow:{mlflow_server}"
    local = _ckpt(tmp_path, "checkpoint_000001")
    with pytest.raises(ConfigError, match="refuses the local checkpoint path.*s3://"):
        core.promote(local, _metrics(local, 0.95), gate={}, registry=registry)
    shared = CheckpointRef(uri="s3://models/ty/runs/digits-train-1/checkpoint_000003",
                           framework="torch", pipeline="digits")
    assert core.promote(shared, _metrics(shared, 0.95), gate={}, registry=registry).promoted
    version = MlflowClient(tracking_uri=mlflow_server).get_model_version_by_alias(
        "digits", "production")
    assert version.source == shared.uri
    assert core.resolve_alias("digits", registry=registry) == shared
