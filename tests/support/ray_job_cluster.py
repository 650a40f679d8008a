"""A real Ray cluster with its dashboard and job server, started by ``ray start --head
--block`` as its own process group, for the ``ray_job`` tests.

Its own ``--temp-dir`` and ports keep it apart from any other Ray on the machine, and it
is stopped by signalling its process group only (never ``ray stop``, which stops every
Ray instance of the user).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Dict, Optional

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAY = os.path.join(os.path.dirname(sys.executable), "ray")

# How long a head may take to serve jobs. A quiet VM needs 15-25 s; at the load average
# of 20+ a full `make test` reaches on 2 cores, 234 s (CI14) and over 240 s (CI16) were
# seen. The modules that start one allow for it in their tests' timeouts
# (HEAD_MODULE_TIMEOUT_S). On 2026-11-29 (load average 12-20) `ray start` timed out
# during startup three times in a row (its raylet's fixed 30 s to register, one GCS call
# alone took 91 s): up to RESTARTS starts again, within the same READY_TIMEOUT_S.
READY_TIMEOUT_S = 600
RESTARTS = 4
HEAD_MODULE_TIMEOUT_S = 1200


def free_port() -> int:
    from tests.conftest import _free_port

    return _free_port()


class RayHead:
    """``ray start --head --block`` in a new session; ``address`` is the job server's."""

    def __init__(self, num_cpus: int = 4, env: Optional[Dict[str, str]] = None) -> None:
        self.num_cpus = num_cpus
        self.gcs_address: Optional[str] = None
        run_env = dict(os.environ)
        for key in ("RAY_ADDRESS", "TRAINYARD_RAY_JOB_ADDRESS", "TRAINYARD_EXECUTION"):
            run_env.pop(key, None)
        run_env.update({
            # Token authentication (Ray's default) needs the token on every client; these
            # tests run a loopback cluster without it.
            "RAY_AUTH_MODE": "disabled",
            "PYTHONPATH": os.pathsep.join(p for p in [REPO, os.environ.get("PYTHONPATH")]
                                          if p),
            "RAY_DEDUP_LOGS": "0",
        })
        run_env.update(env or {})
        self.env = run_env
        self._start()

    def _start(self) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="tyjob-", dir="/tmp")  # short: unix sockets
        self.port, self.dashboard_port = free_port(), free_port()
        self.address = f"http://127.0.0.1:{self.dashboard_port}"
        self.log_path = os.path.join(self.temp_dir, "ray_start.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [RAY, "start", "--head", "--block", "--dashboard-host", "127.0.0.1",
                 "--num-cpus", str(self.num_cpus), "--port", str(self.port),
                 "--dashboard-port", str(self.dashboard_port), "--temp-dir", self.temp_dir,
                 "--include-dashboard", "true", "--disable-usage-stats",
                 # Ports whose defaults (52365, 10001 …) another Ray on the machine holds.
                 *[arg for flag in ("--dashboard-agent-listen-port",
                                    "--dashboard-agent-grpc-port", "--metrics-export-port",
                                    "--runtime-env-agent-port", "--ray-client-server-port")
                   for arg in (flag, str(free_port()))]],
                env=self.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> "RayHead":
        """Until the job server answers (the dashboard's job module starts last) and the
        head's job agent has run a job."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        restarts = RESTARTS
        waiting_for = "`ray start --head` to start the job server"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                # `ray start` gives its raylet a fixed 30 s to register with the GCS and
                # its dashboard a fixed wait to come up; on a loaded 2-core runner either
                # can miss it (CI12, CI14). Start the cluster again, as a user would,
                # rather than fail every test of the module on it.
                if restarts:
                    restarts -= 1
                    self.stop()
                    self._start()
                    continue
                raise RuntimeError(f"ray start exited {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.address}/api/version", timeout=2) as r:
                    if r.status == 200:
                        waiting_for = "the head's job agent to run a probe job"
                        if self._agent_ready():
                            self.gcs_address = f"127.0.0.1:{self.port}"
                            return self
            except OSError:
                pass
            time.sleep(0.5)
        log = self.log()  # before stop() removes the directory it is in
        self.stop()
        raise RuntimeError(
            f"Ray's job server was not ready in {timeout:.0f} s (still waiting for "
            f"{waiting_for}; {RESTARTS - restarts} restarts of `ray start`):\n{log}")

    def _agent_ready(self) -> bool:
        """The head node's job agent takes jobs (it registers after the job server
        answers): a no-op job, submitted and finished, says so."""
        from ray.job_submission import JobSubmissionClient

        client = JobSubmissionClient(self.address)
        try:
            sid = client.submit_job(entrypoint="true", submission_id="cluster-ready-probe")
        except RuntimeError as exc:
            if "already exists" not in str(exc):
                return False
            sid = "cluster-ready-probe"
        deadline = time.monotonic() + 60
        while not client.get_job_status(sid).is_terminal():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except FileNotFoundError:
            return f"(no log: {self.log_path} is gone)"

    def stop(self) -> None:
        """SIGTERM the process group, then SIGKILL what is left: this cluster only."""
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _group_alive(self.proc.pid):
                self.proc.poll()
                time.sleep(0.2)
            if not _group_alive(self.proc.pid):
                break
        self.proc.poll()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Zombies answer signal 0 too: only live members count.
    out = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True,
                         text=True).stdout.split()
    return any(not s.startswith("Z") for s in out)


@pytest.fixture(scope="module")
def head():
    """A Ray head for the module, with this venv's python first on its PATH (as an image
    that has trainyard installed would have). Registered for every module by
    tests/conftest.py (``pytest_plugins``)."""
    cluster = RayHead(num_cpus=4, env={
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
        "TRAINYARD_RAY_NUM_CPUS": "4"})
    try:
        yield cluster.wait_ready()
    finally:
        cluster.stop()
