"""``tasks.airflow_tasks.WebhookNotifier``: what it posts, and that a webhook that is down
or not configured is logged without failing the task.

Airflow reads its configuration once per process, so the notifier runs in a child process
with its own ``AIRFLOW_HOME`` (the test process never imports Airflow)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

from tests.airflow_harness import Webhook
from tests.subprocess_env import REPO, driver_env

CHILD = textwrap.dedent('''
    import json, logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="LOG %(levelname)s %(message)s")
    from tasks.airflow_tasks import WebhookNotifier

    class TI:
        dag_id, task_id, run_id, try_number = "retrain_digits", "promote", "manual__1", 1
        def xcom_pull(self, task_ids, key):
            return {"checkpoint_uri": "file:///ckpt", "pipeline": "digits",
                    "reasons": ["accuracy 0.5 >= 0.9: FAIL"]}

    context = {"ti": TI(), "run_id": "manual__1", "exception": RuntimeError("disk full")}
    WebhookNotifier("rejected")(context)
    WebhookNotifier("failed")(context)
    print("RETURNED")
''')


def notify(tmp_path, webhook_url) -> str:
    env = {k: v for k, v in driver_env().items() if not k.startswith("AIRFLOW")}
    env["AIRFLOW_HOME"] = str(tmp_path)
    if webhook_url:
        env["AIRFLOW_CONN_TRAINYARD_WEBHOOK"] = webhook_url
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture
def webhook():
    hook = Webhook()
    yield hook
    hook.stop()


def test_posts_the_gate_reasons_and_the_failure_as_json(tmp_path, webhook):
    pytest.importorskip("airflow.sdk")
    out = notify(tmp_path, webhook.url)
    rejected, failed = webhook.received
    assert rejected["event"] == "rejected" and rejected["path"] == "/trainyard"
    assert rejected["reasons"] == ["accuracy 0.5 >= 0.9: FAIL"]
    assert rejected["checkpoint_uri"] == "file:///ckpt" and rejected["dag_id"] == "retrain_digits"
    assert failed["event"] == "failed" and failed["error"] == "disk full"
    assert "failed the gate: accuracy 0.5 >= 0.9: FAIL" in out  # and logged


def test_a_webhook_that_is_down_is_logged_and_does_not_raise(tmp_path):
    pytest.importorskip("airflow.sdk")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/hook"
    out = notify(tmp_path, dead)
    assert out.count("Could not post the") == 2 and "RETURNED" in out
    assert "connection 'trainyard_webhook'" in out


def test_without_a_connection_it_only_logs(tmp_path):
    pytest.importorskip("airflow.sdk")
    out = notify(tmp_path, None)
    assert "No Airflow connection 'trainyard_webhook'" in out and "RETURNED" in out
    assert "failed for good" in out  # the failure, in the task log
