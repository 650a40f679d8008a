"""Webhook notifications (``tasks.notify``) and the Prefect flow hook, against a local
HTTP server: what arrives, and that a webhook that is down is logged, never raised."""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from engine.constants import NOTIFY_WEBHOOK_ENV_VAR
from tasks.notify import notify, post_json



@pytest.fixture
def logged():
    """The messages ``tasks.notify`` logs (its own handler: Prefect's logging setup,
    run when another test first imports prefect, replaces the root's, caplog's too)."""
    messages = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore
    logger = logging.getLogger("tasks.notify")
    logger.addHandler(handler)
    yield messages
    logger.removeHandler(handler)


@pytest.fixture
def webhook():
    """A local webhook recording each POST's JSON body; answers ``status``."""
    received, status = [], [204]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(status[0])
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield SimpleNamespace(url=f"http://127.0.0.1:{server.server_address[1]}/hook",
                              received=received, status=status)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def dead_url() -> str:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/hook"


def test_a_notification_is_posted_as_json(webhook):
    assert post_json(webhook.url, {"event": "x", "reasons": ["a: FAIL"], "n": 1.5})
    assert webhook.received == [{"event": "x", "reasons": ["a: FAIL"], "n": 1.5}]


def test_notify_uses_the_setting_and_sends_nothing_without_it(webhook, monkeypatch):
    monkeypatch.delenv(NOTIFY_WEBHOOK_ENV_VAR, raising=False)
    assert notify({"event": "x"}) is False and webhook.received == []
    monkeypatch.setenv(NOTIFY_WEBHOOK_ENV_VAR, webhook.url)
    assert notify({"event": "y"}) and webhook.received == [{"event": "y"}]


def test_a_webhook_that_is_down_or_answers_an_error_is_logged_not_raised(
        webhook, dead_url, logged):
    assert post_json(dead_url, {"event": "trainyard.model.rejected"}, timeout=5) is False
    [message] = logged
    assert message.startswith("Could not send the 'trainyard.model.rejected' notification")
    assert "Connection refused" in message and NOTIFY_WEBHOOK_ENV_VAR in message
    webhook.status[0] = 500
    secret_url = webhook.url + "/services/T0/hunter2"  # a token in the path, as Slack's
    assert post_json(secret_url, {"event": "z"}) is False
    assert "HTTP Error 500" in logged[1] and "hunter2" not in logged[1]


def test_the_flow_failure_hook_posts_the_run_and_never_raises(webhook, dead_url,
                                                              monkeypatch, logged):
    pytest.importorskip("prefect")
    from tasks.prefect import FLOW_FAILED_EVENT, notify_flow_failure

    flow = SimpleNamespace(name="retrain")
    run = SimpleNamespace(id="0b5e", name="brave-otter", deployment_id=None,
                          parameters={"pipeline": "digits"})
    state = SimpleNamespace(name="Failed", message="Flow run encountered an exception: boom")
    monkeypatch.setenv(NOTIFY_WEBHOOK_ENV_VAR, webhook.url)
    notify_flow_failure(flow, run, state)
    [message] = webhook.received
    assert message == {"event": FLOW_FAILED_EVENT, "flow": "retrain", "flow_run_id": "0b5e",
                       "flow_run_name": "brave-otter", "deployment_id": "",
                       "parameters": {"pipeline": "digits"}, "state": "Failed",
                       "message": "Flow run encountered an exception: boom"}
    monkeypatch.setenv(NOTIFY_WEBHOOK_ENV_VAR, dead_url)
    notify_flow_failure(flow, run, state)  # logged, not raised
    assert logged[0].startswith("Could not send the 'trainyard.flow_run.failed' notification")


def test_trainyard_notifications_needs_a_reachable_server(dead_url, monkeypatch, capsys):
    pytest.importorskip("prefect")
    from prefect.settings import (PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES,
                                  temporary_settings)

    from tasks.cli import main

    with temporary_settings(updates={PREFECT_API_URL: None}):
        assert main(["notifications", "--webhook", "http://hooks.example/x"]) == 2
    assert "set PREFECT_API_URL" in capsys.readouterr().err
    api = dead_url.replace("/hook", "/api")
    with temporary_settings(updates={PREFECT_API_URL: api, PREFECT_CLIENT_MAX_RETRIES: 0}):
        assert main(["notifications", "--webhook", "http://hooks.example/x"]) == 2
    assert f"cannot reach the Prefect API at {api}" in capsys.readouterr().err
