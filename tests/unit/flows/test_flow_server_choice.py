"""Which Prefect API ``python -m flows.retrain`` (``make run``) uses (``flows._server``):
``PREFECT_API_URL`` when set, else a running ``prefect server start --background`` (PID
file + health), else Prefect's temporary server with patient settings. No Prefect server
starts here: the "background server" is a stand-in that answers ``/api/health``."""

from __future__ import annotations

import http.server
import os
import threading
from typing import Iterator

import pytest
from prefect.settings import (PREFECT_API_URL, PREFECT_HOME,
                              PREFECT_SERVER_API_HOST, PREFECT_SERVER_API_PORT,
                              PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
                              temporary_settings)

from flows._server import SERVER_ENV_VAR, background_server_url, prefect_api


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(200 if self.path == "/api/health" else 404)
        self.end_headers()
        self.wfile.write(b"true")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_port() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def no_api_url(tmp_path, monkeypatch) -> Iterator[str]:
    """No ``PREFECT_API_URL``; a ``PREFECT_HOME`` of the test's own."""
    for name in ("PREFECT_API_URL", SERVER_ENV_VAR,
                 PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.name):
        monkeypatch.delenv(name, raising=False)
    home = str(tmp_path / "prefect_home")
    os.makedirs(home)
    with temporary_settings(updates={PREFECT_HOME: home, PREFECT_SERVER_API_HOST: "0.0.0.0"},
                            restore_defaults={PREFECT_API_URL}):
        yield home


def _write_pid(home: str, pid: int) -> None:
    with open(os.path.join(home, "server.pid"), "w") as f:
        f.write(str(pid))


def test_a_running_background_server_is_used(no_api_url, health_port):
    _write_pid(no_api_url, os.getpid())  # a live process, as Prefect's PID file names
    with temporary_settings(updates={PREFECT_SERVER_API_PORT: health_port}):
        url = f"http://127.0.0.1:{health_port}/api"
        assert background_server_url() == url
        with prefect_api():
            assert PREFECT_API_URL.value() == url
        assert PREFECT_API_URL.value() is None


@pytest.mark.parametrize("pid_file", ["stale", "unhealthy", "none"])
def test_otherwise_the_temporary_server_with_patient_settings(no_api_url, health_port,
                                                              pid_file):
    if pid_file == "stale":  # the server exited and left its PID file
        _write_pid(no_api_url, 2 ** 22 + 17)  # above Linux's pid_max: no such process
    elif pid_file == "unhealthy":  # a live PID, but nothing answers on the port
        _write_pid(no_api_url, os.getpid())
    port = health_port + 1 if pid_file == "unhealthy" else health_port
    with temporary_settings(updates={PREFECT_SERVER_API_PORT: port}):
        assert background_server_url() is None
        with prefect_api():
            assert PREFECT_API_URL.value() is None  # Prefect starts its temporary one
            assert PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value() == 120


def test_an_api_url_that_is_set_wins(no_api_url, health_port):
    _write_pid(no_api_url, os.getpid())
    with temporary_settings(updates={PREFECT_API_URL: "http://elsewhere:4200/api",
                                     PREFECT_SERVER_API_PORT: health_port}):
        with prefect_api():
            assert PREFECT_API_URL.value() == "http://elsewhere:4200/api"


def test_a_bad_server_mode_says_what_to_set(no_api_url, monkeypatch):
    monkeypatch.setenv(SERVER_ENV_VAR, "persistent")
    with pytest.raises(ValueError, match=f"{SERVER_ENV_VAR}='persistent'.*background, temporary"):
        with prefect_api():
            pass
