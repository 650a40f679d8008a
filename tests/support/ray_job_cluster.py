"""A real Ray cluster with its dashboard and job server, started by ``ray start --head
--block`` as its own process group, for the ``ray_job`` tests, with Ray's token
authentication on (Ray's default; ``RayHead(auth=False)`` for a cluster without it).

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

    def __init__(self, num_cpus: int = 4, env: Optional[Dict[str, str]] = None,
                 include_dashboard: bool = True, auth: bool = True) -> None:
        import secrets

        self.num_cpus = num_cpus
        # Ray's token authentication, on (Ray's default) unless ``auth`` is False: the
        # head's own token, which clients must be given (``token``, ``headers``).
        self.token: Optional[str] = secrets.token_hex(24) if auth else None
        # Without its dashboard a head has no job server: ``address`` is then where a
        # user would point at one (the dashboard port it was given), which nothing serves.
        self.include_dashboard = include_dashboard
        self.gcs_address: Optional[str] = None
        run_env = dict(os.environ)
        for key in ("RAY_ADDRESS", "TRAINYARD_RAY_JOB_ADDRESS", "TRAINYARD_EXECUTION"):
            run_env.pop(key, None)
        for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            run_env.pop(key, None)
        run_env.update({
            "RAY_AUTH_MODE": "token" if self.token else "disabled",
            **({"RAY_AUTH_TOKEN": self.token} if self.token else {}),
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
                 "--include-dashboard", str(self.include_dashboard).lower(),
                 "--disable-usage-stats",
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
            if not self.include_dashboard:
                if self._gcs_answers():
                    self.gcs_address = f"127.0.0.1:{self.port}"
                    return self
                time.sleep(0.5)
                continue
            try:
                request = urllib.request.Request(f"{self.address}/api/version",
                                                 headers=self.headers or {})
                with urllib.request.urlopen(request, timeout=2) as r:
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

    def _gcs_answers(self) -> bool:
        """The head's GCS serves its cluster: ``ray status`` against it succeeds."""
        out = subprocess.run([RAY, "status", "--address", f"127.0.0.1:{self.port}"],
                             env=self.env, capture_output=True, timeout=60)
        return out.returncode == 0

    @property
    def headers(self) -> Optional[Dict[str, str]]:
        """The HTTP headers a client of this head sends (its token), as Ray's own."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else None

    def client(self):
        """A JobSubmissionClient of this head, with its token."""
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.address, headers=self.headers)

    def _agent_ready(self) -> bool:
        """The head node's job agent takes jobs (it registers after the job server
        answers): a no-op job, submitted and finished, says so."""
        client = self.client()
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


class RayNode:
    """A second node joined to ``head`` with ``ray start --address --block`` (its own
    process group, its own agent ports), offering ``resources`` only it has."""

    def __init__(self, head: RayHead, num_cpus: int = 2,
                 resources: Optional[Dict[str, float]] = None) -> None:
        self.head = head
        self.num_cpus, self.resources = num_cpus, dict(resources or {})
        self._start()

    def _start(self) -> None:
        import json

        head = self.head
        self.temp_dir = tempfile.mkdtemp(prefix="tynode-", dir="/tmp")
        self.log_path = os.path.join(self.temp_dir, "ray_start.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [RAY, "start", "--address", head.gcs_address, "--block",
                 "--num-cpus", str(self.num_cpus), "--resources", json.dumps(self.resources),
                 "--disable-usage-stats",
                 *[arg for flag in ("--dashboard-agent-listen-port",
                                    "--dashboard-agent-grpc-port", "--metrics-export-port",
                                    "--runtime-env-agent-port", "--node-manager-port",
                                    "--object-manager-port")
                   for arg in (flag, str(free_port()))]],
                env=head.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> "RayNode":
        """Until the head's state API lists this node alive (its id is ``node_id``)."""
        from ray.util.state import list_nodes

        deadline = time.monotonic() + timeout
        restarts = RESTARTS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                # As the head's: `ray start` gives the node a fixed wait for the head's
                # GCS to answer ("Failed to get node info: Deadline Exceeded" on a loaded
                # runner, CI of 187955a): join again, as a user would.
                if restarts:
                    restarts -= 1
                    self.stop()
                    self._start()
                    continue
                raise RuntimeError(f"ray start exited {self.proc.returncode}:\n"
                                   f"{open(self.log_path, errors='replace').read()[-4000:]}")
            try:
                alive = [n for n in list_nodes(address=self.head.address, detail=True)
                         if n.state == "ALIVE" and not n.is_head_node]
            except Exception:  # noqa: BLE001 - the state API is still starting
                alive = []
            if alive:
                self.node_id = alive[0].node_id
                return self
            time.sleep(0.5)
        raise RuntimeError(f"the node did not join in {timeout:.0f} s")

    def stop(self) -> None:
        RayHead.stop(self)  # type: ignore[arg-type] - same process-group stop


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
