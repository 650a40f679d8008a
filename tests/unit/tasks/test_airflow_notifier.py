"""``tasks.airflow.WebhookNotifier``: what it posts, and that a webhook that is down
or not configured is logged without failing the task.

Airflow reads its configuration once per process, so the notifier runs in one child
process with its own ``AIRFLOW_HOME`` (the test process never imports Airflow): once per
connection — a webhook that answers, one nothing listens on, none at all."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

from tests.support.airflow_harness import Webhook
from tests.support.subprocess_env import REPO, driver_env

CHILD = textwrap.dedent('''
    import logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="LOG %(levelname)s %(message)s")
    from tasks.airflow import WebhookNotifier

    class TI:
        dag_id, task_id, run_id, try_number = "retrain_digits", "promote", "manual__1", 1
        def xcom_pull(self, task_ids, key):
            return {"checkpoint_uri": "file:///ckpt", "pipeline": "digits",
                    "reasons": ["accuracy 0.5 >= 0.9: FAIL"]}

    context = {"ti": TI(), "run_id": "manual__1", "exception": RuntimeError("disk full")}
    for conn_id in sys.argv[1:]:
        print("=== " + conn_id, flush=True)
        WebhookNotifier("rejected", conn_id=conn_id)(context)
        WebhookNotifier("failed", conn_id=conn_id)(context)
        print("RETURNED", flush=True)
''')


@pytest.fixture(scope="module")
def notified(tmp_path_factory):
    """``(webhook, {conn id: what the child printed for it})``."""
    pytest.importorskip("airflow.sdk")
    hook = Webhook()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/hook"
    env = {k: v for k, v in driver_env().items() if not k.startswith("AIRFLOW")}
    env.update({"AIRFLOW_HOME": str(tmp_path_factory.mktemp("airflow_home")),
                "AIRFLOW_CONN_HOOK_UP": hook.url, "AIRFLOW_CONN_HOOK_DOWN": dead})
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, "hook_up", "hook_down",
                               "no_such_conn"], env=env, cwd=REPO, capture_output=True,
                              text=True, timeout=300)
    finally:
        hook.stop()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    parts = proc.stdout.split("=== ")[1:]
    return hook, {p.split("\n", 1)[0]: p for p in parts}


def test_posts_the_gate_reasons_and_the_failure_as_json(notified):
    hook, out = notified
    rejected, failed = hook.received
    assert rejected["event"] == "rejected" and rejected["path"] == "/trainyard"
    assert rejected["reasons"] == ["accuracy 0.5 >= 0.9: FAIL"]
    assert rejected["checkpoint_uri"] == "file:///ckpt"
    assert (rejected["dag_id"], rejected["task_id"]) == ("retrain_digits", "promote")
    assert failed["event"] == "failed" and failed["error"] == "disk full"
    assert "failed the gate: accuracy 0.5 >= 0.9: FAIL" in out["hook_up"]  # and logged
    assert "failed for good" in out["hook_up"]


def test_a_webhook_that_is_down_is_logged_and_does_not_raise(notified):
    _, out = notified
    text = out["hook_down"]
    assert text.count("Could not post the") == 2 and "RETURNED" in text
    assert "connection 'hook_down'" in text


def test_without_a_connection_it_only_logs(notified):
    _, out = notified
    text = out["no_such_conn"]
    assert "No Airflow connection 'no_such_conn'" in text and "RETURNED" in text
    assert "failed for good" in text  # the failure, in the task log
