"""A real ``prefect server start`` on loopback, with a process work pool, for the tests
that run deployments through a Prefect worker (test_prefect_deployments, test_ray_job)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator, List

import pytest

from tests.conftest import REPO

POOL = "trainyard-process"


def prefect(*args: str, env: dict, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """Run the ``prefect`` command line; fail the test with its output unless it exits 0."""
    proc = subprocess.run([sys.executable, "-m", "prefect", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, **kw)
    assert proc.returncode == 0, f"prefect {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "prefect server exited during start-up"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"prefect server not healthy at {url} after {timeout} s")


def stop(proc: subprocess.Popen) -> None:
    """SIGINT (Prefect's own shutdown), then SIGKILL after 20 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_worker(env: dict, cwd: Path, logs: Path) -> subprocess.Popen:
    """``prefect worker start`` on the process pool, its output in ``logs/worker.log``."""
    return subprocess.Popen(
        [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--type",
         "process"], env=env, cwd=cwd,
        stdout=open(logs / "worker.log", "w"), stderr=subprocess.STDOUT)


def drain_event_and_log_workers() -> None:
    """Send what this process's Prefect events and log workers hold, and stop them.
    They are process-wide singletons whose client is bound to the API URL of the moment
    they started (an events worker is keyed by its client type, not by the URL): one left
    from an earlier server would send a later server's task-run events to the first,
    and the API would never record those task runs. The next event or log line starts
    a fresh worker for the current URL."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (EventsWorker, APILogWorker):
        worker.drain_all(timeout=30)


@contextlib.contextmanager
def prefect_server(env: dict, port: int, cwd: Path, logs: Path
                   ) -> Iterator[List[subprocess.Popen]]:
    """The server on ``127.0.0.1:port`` (``env["PREFECT_API_URL"]`` must point there),
    healthy, with the process work pool, and this process's Prefect settings pointed at
    it. Yields a list for the caller's own processes (a worker): they are stopped at
    the end, then the server. Its output goes to ``logs/server.log``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL, temporary_settings

    api = f"http://127.0.0.1:{port}/api"
    assert env.get("PREFECT_API_URL") == api, "set env['PREFECT_API_URL'] to the server's"
    server = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
         "--port", str(port)], env=env, cwd=cwd,
        stdout=open(logs / "server.log", "w"), stderr=subprocess.STDOUT)
    procs: List[subprocess.Popen] = []
    try:
        wait_healthy(f"{api}/health", server, 180)
        with temporary_settings(updates={PREFECT_API_URL: api}):
            try:
                with get_client(sync_client=True) as client:
                    client.create_work_pool(WorkPoolCreate(name=POOL, type="process"))
                yield procs
            finally:
                # While the server still answers: send what this process queued for it.
                drain_event_and_log_workers()
    finally:
        for proc in [*procs, server]:
            stop(proc)
