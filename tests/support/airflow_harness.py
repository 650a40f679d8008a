"""Airflow 3 under its own components, for tests: ``airflow scheduler``, ``airflow
dag-processor``, ``airflow triggerer`` and ``airflow api-server`` with the LocalExecutor on a
SQLite metadata database (a copy of the run's migrated one) in a temporary ``AIRFLOW_HOME``, the
project's ``dags/`` as the DAGs folder, a Ray head the tasks join (``RAY_ADDRESS``) and a
local HTTP server as the notifiers' webhook (connection ``trainyard_webhook``).

Airflow 3.3 accepts SQLite with the LocalExecutor (``airflow standalone`` runs that way), so
no PostgreSQL is needed. Each process runs in its own process group on free loopback ports;
:meth:`AirflowCluster.stop` ends the groups (the executor's workers and task processes
with them) and then every descendant that left its group.

The REST API v2 is called the way Airflow 3 documents it: ``POST /auth/token`` with the
SimpleAuthManager's user and password, then ``Authorization: Bearer <token>``. Waits poll a
condition (health, a DAG parsed, a run's state), never a fixed sleep.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional

import requests

from tests.support.airflow_home import migrated_home

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS = os.path.join(REPO, "dags")
COMPONENTS = ("scheduler", "dag-processor", "triggerer", "api-server")
USER = "admin"
TERMINAL = {"success", "failed"}


def free_port() -> int:
    from tests.conftest import _free_port as draw  # outside the ephemeral range

    return draw()


def _descendants(pid: int) -> list:
    """The processes ``pid`` started (recursively), as ``psutil.Process`` objects, which
    check the pid's start time before they signal it (no reused pid is hit)."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Webhook:
    """A local HTTP server that records the JSON bodies POSTed to it."""

    def __init__(self) -> None:
        self.received: List[Dict[str, Any]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append({"path": self.path, **json.loads(body or b"{}")})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/trainyard"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def events(self, event: str, dag_id: Optional[str] = None,
               run_id: Optional[str] = None) -> List[Dict[str, Any]]:
        return [m for m in list(self.received) if m.get("event") == event
                and (dag_id is None or m.get("dag_id") == dag_id)
                and (run_id is None or m.get("run_id") == run_id)]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _api_session() -> requests.Session:
    """Requests to the REST API: a GET is asked again, twice, when the API server does
    not answer (CI46: it stalled past 30 s under a load of 20); a POST or PATCH is sent
    once (urllib3 retries only the methods listed)."""
    from urllib3.util.retry import Retry

    session = requests.Session()
    retry = Retry(total=2, connect=2, read=2, status=0, allowed_methods=frozenset({"GET"}),
                  raise_on_status=False)
    session.mount("http://", requests.adapters.HTTPAdapter(max_retries=retry))
    return session


class AirflowCluster:
    """Airflow's four components and a Ray head; ``api(...)`` calls the REST API v2."""

    def __init__(self, root: str, env: Optional[Dict[str, str]] = None,
                 shared_dir: Optional[str] = None) -> None:
        self.root = root
        # Where the run's migrated database template is (tests/support/airflow_home.py).
        self.shared_dir = shared_dir or root
        self.home = os.path.join(root, "airflow_home")
        self.logs = os.path.join(root, "process_logs")
        self.storage = os.path.join(root, "storage")
        for d in (self.home, self.logs, self.storage):
            os.makedirs(d, exist_ok=True)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.password = "ty-" + uuid.uuid4().hex
        self.webhook = Webhook()
        self.procs: Dict[str, subprocess.Popen] = {}
        self.ray_dir = tempfile.mkdtemp(prefix="tyaf")  # short: Ray's socket paths
        self.ray_address = f"127.0.0.1:{free_port()}"
        self.extra_env = dict(env or {})
        self._token: Optional[str] = None
        self._api = _api_session()
        self._secret = uuid.uuid4().hex + uuid.uuid4().hex

    # --- environment --------------------------------------------------------------------
    def env(self, **overrides: str) -> Dict[str, str]:
        """The environment of every Airflow process (``overrides`` last)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AIRFLOW_", "AIRFLOW__", "RAY_ADDRESS", "RAY_TMPDIR"))}
        env.update({
            "AIRFLOW_HOME": self.home,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN":
                f"sqlite:///{os.path.join(self.home, 'airflow.db')}",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_FOLDER": DAGS,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE":
                os.path.join(self.home, "passwords.json"),
            "AIRFLOW__API__BASE_URL": self.base,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": self._jwt_secret(),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW_CONN_TRAINYARD_WEBHOOK": self.webhook.url,
            "TRAINYARD_STORAGE_PATH": self.storage,
            "RAY_ADDRESS": self.ray_address,
            # Where `ray start` records "the current cluster": ours, not /tmp/ray's, so no
            # plain ray.init() elsewhere joins this cluster.
            "RAY_TMPDIR": self.ray_dir,
            # `ray start` turns token authentication on; the tasks' drivers would need the
            # token file. Loopback-only test cluster: off.
            "RAY_AUTH_MODE": "disabled",
            "RAY_DEDUP_LOGS": "1",
            "PYTHONPATH": os.pathsep.join(p for p in [REPO, os.environ.get("PYTHONPATH")] if p),
        })
        env.update(self.extra_env)
        env.update(overrides)
        return env

    def _jwt_secret(self) -> str:
        # One secret for every component (the scheduler signs the tasks' tokens, the
        # api-server checks them).
        return self._secret

    # --- processes ----------------------------------------------------------------------
    def start(self, timeout: float = 420) -> None:
        """Ray head, a migrated database, then the four components; returns once the
        health endpoint reports every component healthy."""
        # The SimpleAuthManager's user and its password (it generates none for a user
        # that has one in this file).
        with open(os.path.join(self.home, "passwords.json"), "w") as fh:
            json.dump({USER: self.password}, fh)
        self._start_ray()
        migrated_home(self.home, self.shared_dir)
        for name in COMPONENTS:
            self.start_component(name)
        self.wait_for(self._healthy, timeout, "every Airflow component healthy")

    def _start_ray(self, timeout: float = 300, attempts: int = 5) -> None:
        """``ray start --head --block`` in its own group, waited on until it prints "Ray
        runtime started.". On a loaded machine the raylet may miss Ray's fixed 30 s to
        register with the GCS ("The current node timed out during startup") and ``ray
        start`` exits: stop what it left and start it again, as tests/support/ray_job_cluster.py
        does, within the same ``timeout``."""
        port = self.ray_address.rsplit(":", 1)[1]
        log = os.path.join(self.logs, "ray.log")
        deadline = time.monotonic() + timeout
        for attempt in range(1, attempts + 1):
            # No fixed port (the other xdist worker may run a cluster too) and its own
            # temp dir (tests/README.md, "Writing tests that run under xdist").
            cmd = [os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--head",
                   f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=4",
                   "--include-dashboard=false", "--disable-usage-stats",
                   f"--ray-client-server-port={free_port()}",
                   f"--dashboard-agent-listen-port={free_port()}",
                   f"--metrics-export-port={free_port()}",
                   f"--temp-dir={self.ray_dir}", "--block"]
            start = os.path.getsize(log) if os.path.exists(log) else 0
            # Unbuffered, so that "Ray runtime started." reaches the log as it is printed.
            self._popen("ray", cmd, {**self.env(), "PYTHONUNBUFFERED": "1"})
            proc = self.procs["ray"]
            while time.monotonic() < deadline:
                with open(log, "rb") as f:
                    f.seek(start)
                    if b"Ray runtime started." in f.read():
                        return
                if proc.poll() is not None:
                    break
                time.sleep(0.5)
            else:
                break  # out of time: fail below with the logs
            self._stop_groups(["ray"], grace=5)
        raise AssertionError(f"Waiting for the Ray head: {attempt} attempt(s) of `ray "
                             f"start --head` within {timeout:.0f} s did not start it.\n"
                             f"{self.log_tails()}")

    def start_component(self, name: str, **env: str) -> None:
        """Start ``airflow <name>`` (again) with ``env`` over the cluster's environment."""
        self.stop_component(name)
        args = [sys.executable, "-m", "airflow", name]
        if name == "api-server":
            args += ["--host", "127.0.0.1", "--port", str(self.port)]
        self._popen(name, args, self.env(**env))

    def _popen(self, name: str, cmd: List[str], env: Dict[str, str]) -> None:
        log = open(os.path.join(self.logs, f"{name}.log"), "ab")
        self.procs[name] = subprocess.Popen(cmd, env=env, cwd=self.root, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)  # its own group
        log.close()

    def stop_component(self, name: str, grace: float = 15) -> None:
        self._stop_groups([name], grace)

    def _stop_groups(self, names: List[str], grace: float) -> None:
        """SIGTERM the process groups of ``names`` at once, SIGKILL them after ``grace``
        seconds, then every descendant they had that left the group (Ray's workers)."""
        procs = [self.procs.pop(n) for n in names if n in self.procs]
        descendants = [d for p in procs for d in _descendants(p.pid)]
        for proc in procs:
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)  # and children left behind
            proc.wait()
        for child in descendants:
            try:
                child.kill()
            except Exception:  # psutil.NoSuchProcess: already gone
                pass

    def stop(self) -> None:
        self._stop_groups(list(COMPONENTS) + ["ray"], grace=5)
        self.webhook.stop()
        shutil.rmtree(self.ray_dir, ignore_errors=True)

    def log_tails(self, chars: int = 3000) -> str:
        """The end of every component's log (for a failure message)."""
        out = []
        for name in sorted(os.listdir(self.logs)):
            with open(os.path.join(self.logs, name), errors="replace") as fh:
                out.append(f"----- {name} -----\n{fh.read()[-chars:]}")
        return "\n".join(out)

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        """Every attempt's log of a task instance (from AIRFLOW_HOME/logs)."""
        root = os.path.join(self.home, "logs", f"dag_id={dag_id}", f"run_id={run_id}",
                            f"task_id={task_id}")
        texts = []
        for dirpath, _, files in os.walk(root):
            for name in sorted(files):
                with open(os.path.join(dirpath, name), errors="replace") as fh:
                    texts.append(fh.read())
        return "\n".join(texts)

    # --- waiting ------------------------------------------------------------------------
    def wait_for(self, condition: Callable[[], Any], timeout: float, what: str,
                 poll: float = 0.5) -> Any:
        """``condition()``'s first truthy value; fails with the components' logs after
        ``timeout`` or as soon as a component exited."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
            if dead or time.monotonic() > deadline:
                why = f"components exited: {dead}" if dead else f"{timeout:.0f} s passed"
                raise AssertionError(f"Waiting for {what}: {why}.\n{self.log_tails()}")
            time.sleep(poll)

    def _healthy(self) -> bool:
        try:
            health = requests.get(f"{self.base}/api/v2/monitor/health", timeout=5).json()
        except (requests.RequestException, ValueError):
            return False
        parts = [health.get(k) or {} for k in ("metadatabase", "scheduler", "triggerer",
                                               "dag_processor")]
        return all(p.get("status") == "healthy" for p in parts)

    # --- REST API v2 --------------------------------------------------------------------
    def token(self) -> str:
        if self._token is None:
            r = requests.post(f"{self.base}/auth/token", timeout=30,
                              json={"username": USER, "password": self.password})
            assert r.status_code == 201, f"POST /auth/token: {r.status_code} {r.text}"
            self._token = r.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, ok: tuple = (200, 201, 204),
            **kwargs: Any) -> Any:
        """``method /api/v2<path>`` with the bearer token; the JSON answer (None for a
        404 when 404 is in ``ok``)."""
        r = self._api.request(method, f"{self.base}/api/v2{path}", timeout=60,
                              headers={"Authorization": f"Bearer {self.token()}"}, **kwargs)
        assert r.status_code in ok, f"{method} {path}: {r.status_code} {r.text[:2000]}"
        return None if r.status_code in (204, 404) else r.json()

    def wait_dag(self, dag_id: str, timeout: float = 300,
                 condition: Callable[[Dict[str, Any]], bool] = lambda d: True) -> Dict:
        """The DAG once the dag-processor has parsed it (and ``condition`` holds)."""
        def parsed() -> Optional[Dict[str, Any]]:
            dag = self.api("GET", f"/dags/{dag_id}", ok=(200, 404))
            return dag if dag and condition(dag) else None
        return self.wait_for(parsed, timeout, f"DAG {dag_id} parsed", poll=1)

    def trigger(self, dag_id: str, conf: Optional[Dict[str, Any]] = None) -> str:
        run = self.api("POST", f"/dags/{dag_id}/dagRuns",
                       json={"logical_date": None, "conf": conf or {}})
        return run["dag_run_id"]

    def runs(self, dag_id: str) -> List[Dict[str, Any]]:
        return self.api("GET", f"/dags/{dag_id}/dagRuns",
                        params={"order_by": "run_after", "limit": 100})["dag_runs"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 900) -> Dict[str, Any]:
        """The run once it finished (success or failed)."""
        def done() -> Optional[Dict[str, Any]]:
            run = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
            return run if run["state"] in TERMINAL else None
        return self.wait_for(done, timeout, f"{dag_id} run {run_id} to finish", poll=1)

    def task_instances(self, dag_id: str, run_id: str) -> Dict[str, Dict[str, Any]]:
        tis = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances",
                       params={"limit": 100})["task_instances"]
        return {ti["task_id"]: ti for ti in tis}

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        entry = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/"
                                f"xcomEntries/{key}", params={"deserialize": "true"})
        value = entry["value"]
        return json.loads(value) if isinstance(value, str) else value

    def describe(self, dag_id: str, run_id: str) -> str:
        """A run's task states, the failed tasks' logs and the components' logs."""
        tis = self.task_instances(dag_id, run_id)
        lines = [f"{dag_id} {run_id}: " + json.dumps(
            {t: (ti["state"], ti["try_number"]) for t, ti in tis.items()})]
        for task_id, ti in tis.items():
            if ti["state"] in ("failed", "up_for_retry"):
                lines.append(f"----- task {task_id} -----\n"
                             + self.task_log(dag_id, run_id, task_id)[-4000:])
        return "\n".join(lines) + "\n" + self.log_tails(1500)
