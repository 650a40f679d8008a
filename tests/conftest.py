"""Shared fixtures: one local Ray per test session, env-leak guard, GPU skips."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from typing import Dict

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from tests.support.script_runner import PROCESS_ONCE_ENV  # noqa: E402 - needs REPO on the path

# Fixtures that more than one test module takes (an Airflow home with a migrated
# database, a Ray head with its job server), defined beside their helpers.
pytest_plugins = ("tests.support.airflow_home", "tests.support.ray_job_cluster")

# Ray's logical CPUs are not cores: give Ray Data room beside 2 training workers.
RAY_TEST_CPUS = 6

# What the pipelines cache on the machine (the digits split, TRAINYARD_DATA_CACHE) goes
# to a directory of this test process, not ~/.cache. Set before any Ray starts, so that
# its workers, and the scripts and services the tests start, inherit it.
_DATA_CACHE = tempfile.mkdtemp(prefix="trainyard-data-cache-")
atexit.register(shutil.rmtree, _DATA_CACHE, ignore_errors=True)
os.environ.setdefault("TRAINYARD_DATA_CACHE", _DATA_CACHE)


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# The modules that take minutes, longest first. Under xdist (`--dist loadfile
# --no-loadscope-reorder`, see the Makefile) modules are handed out in collection order,
# so these start first and the short ones fill the gaps at the end, instead of a
# ten-minute module starting last. The first three start together: not two that each
# start a cluster of services (Airflow's components, a Ray head with its job server).
# The summary at the end of a run lists the modules' times ("slowest modules"): keep
# this list in step with it.
SLOW_MODULES_FIRST = [
    "tests/integration/test_examples.py",
    "tests/integration/test_fault_tolerance.py",
    "tests/integration/test_rllib.py",
    "tests/reliability/test_load.py",
    "tests/integration/test_data_ingest.py",
    "tests/integration/test_ray_job.py",
    "tests/compat/test_compat_scripts.py",
    "tests/integration/test_prefect_deployments.py",
    "tests/integration/test_airflow_components.py",
    "tests/integration/test_airflow_dags.py",
    "tests/integration/test_torch_ddp.py",
    "tests/integration/test_trainer_basics.py",
    "tests/integration/test_prefect_flows.py",
    "tests/integration/test_tune.py",
    "tests/integration/test_worker_reuse.py",
    "tests/integration/test_predict.py",
    "tests/integration/test_tensorflow.py",
    "tests/integration/test_s3_storage.py",
    "tests/compat/test_compat_tune_scripts.py",
    "tests/integration/test_bench_smoke.py",
    "tests/integration/test_multinode.py",
    "tests/integration/test_huggingface.py",
    "tests/integration/test_airflow_ray_job.py",
    "tests/integration/test_run_lease.py",
]


def _module_rank(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    try:
        return SLOW_MODULES_FIRST.index(path)
    except ValueError:
        return len(SLOW_MODULES_FIRST)


_module_seconds: Dict[str, float] = {}


def pytest_runtest_logreport(report):
    # (A file outside the rootdir has no module part in its node id.)
    module = report.nodeid.split("::", 1)[0] or report.location[0]
    _module_seconds[module] = _module_seconds.get(module, 0.0) + report.duration


def pytest_runtest_teardown(item, nextitem):
    """At most once a minute, the session Ray's gone workers' log files go to its
    ``logs/old`` (what the engine does after a fit on a Ray it started): Ray's log
    monitor lists the log directory 50 times a second, so its CPU grew with every
    worker the session ever started."""
    if "ray" in sys.modules:
        from engine._internal.ray_runtime.logs import sweep_worker_logs_if_due

        sweep_worker_logs_if_due(only_own=False)


# Each test's start and end, with the pid of the pytest process running it, so that the
# CPU of every process under that pid (Ray's workers and daemons, subprocesses) is
# charged to the test it ran for: by tests/support/cpu_account.py in the session's own
# process (the summary's "most CPU by module"), and by scripts/cpu_by_process.py
# --by-test, which sets the file. pytest_configure names one when nothing did.
_TIMELINE = os.environ.get("TRAINYARD_TEST_TIMELINE")
_cpu_account = None  # the session process's tests/support/cpu_account.py sampler


def pytest_configure(config):
    global _TIMELINE, _cpu_account
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # an xdist worker writes the timeline its controller named
        _TIMELINE = workerinput.get("trainyard_timeline") or _TIMELINE
        return
    if not os.path.exists("/proc/stat"):
        return
    if not _TIMELINE:
        fd, _TIMELINE = tempfile.mkstemp(prefix="trainyard-timeline-", suffix=".txt")
        os.close(fd)
        atexit.register(lambda path=_TIMELINE: os.path.exists(path) and os.remove(path))
    from tests.support.cpu_account import CpuAccount

    _cpu_account = CpuAccount(_TIMELINE).start()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist's controller: the timeline goes to the workers in their input, not in the
    environment, so that a pytest a test starts keeps an account of its own."""
    node.workerinput["trainyard_timeline"] = _TIMELINE


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _TIMELINE:
        yield
        return
    import time

    # (A file outside the rootdir has no module part in its node id.)
    nodeid = item.nodeid if not item.nodeid.startswith("::") else item.location[0] + item.nodeid

    def mark(what: str) -> None:
        with open(_TIMELINE, "a") as f:  # one short line per write: appends interleave whole
            f.write(f"{time.time():.3f} {os.getpid()} {what} {nodeid}\n")

    mark("start")
    yield
    mark("end")


# The machine's speed when the run starts (tests/support/machine_speed.py): the suite is
# CPU-bound on 2 cores, and the development VM's speed per CPU-second varied more from
# day to day than the suite did, so its summary says what speed a run had.
_speed_at_start: Dict[str, object] = {}


def pytest_sessionstart(session):
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller measures
        return
    from tests.support import machine_speed

    _speed_at_start.update(ms=machine_speed.reference_ms(), cpu=machine_speed.cpu_times())


def pytest_terminal_summary(terminalreporter):
    write = terminalreporter.write_line
    slowest = sorted(_module_seconds.items(), key=lambda kv: -kv[1])[:20]
    if slowest:
        terminalreporter.write_sep("=", "slowest modules (setup + call + teardown)")
        for module, seconds in slowest:
            write(f"{seconds:8.1f}s {module}")
    by_module = _cpu_account.stop() if _cpu_account is not None else {}
    costliest = sorted(by_module.items(), key=lambda kv: -kv[1])[:20]
    if costliest:
        terminalreporter.write_sep("=", "most CPU by module (tests/support/cpu_account.py)")
        for module, cpu in costliest:
            write(f"{cpu:8.1f} CPU-s {_module_seconds.get(module, 0.0):8.1f}s  {module}")
    if _speed_at_start:
        from tests.support import machine_speed

        now = machine_speed.cpu_times()
        steal = machine_speed.steal_share(_speed_at_start["cpu"], now)
        busy = machine_speed.busy_seconds(_speed_at_start["cpu"], now)
        terminalreporter.write_sep("=", "machine speed (tests/support/machine_speed.py)")
        write(f"reference loop: {_speed_at_start['ms']:.0f} ms of CPU at the start, "
              f"{machine_speed.reference_ms():.0f} ms at the end (lower is faster)"
              + (f"; steal {100 * steal:.1f} % of the machine's CPU time"
                 if steal is not None else ""))
        if busy is not None:
            from tests.support.cpu_account import BETWEEN, OUTSIDE

            tests = sum(v for k, v in by_module.items() if k not in (OUTSIDE, BETWEEN))
            write(f"CPU of the run: {busy:.0f} CPU-s on the machine (/proc/stat, start to "
                  f"end), {tests:.0f} CPU-s under the test processes while tests ran")


def pytest_collection_modifyitems(config, items):
    items.sort(key=_module_rank)  # stable: the order within a module stays
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run on a GPU machine (marker 'gpu')")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@contextlib.contextmanager
def _env_while_ray_starts(**env: str):
    """``env`` in os.environ while a local Ray starts (its raylet, and so every worker
    it spawns, inherits it), then the environment as it was."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# What the session's Ray costs while it waits. It lives for the whole run on each xdist
# worker, and much of that time runs modules that do not use it (scripts with their own
# Ray, Airflow's and Prefect's servers). Measured on the 2-core development VM, idle over
# 40 s after four tasks: 11-12 % of a core, of which each idle worker process 1.2 % (Ray's
# core worker wakes every 10 ms to check signals; 5 idle workers stayed), the log monitor
# 1.4 %, the dashboard agent 1.3 % (half of it the metrics every process reports to it),
# the API server 0.45 %. No test reads the session's metrics, its API server or state API.
_SESSION_SYSTEM_CONFIG = {
    # An idle worker process exits after a minute unused, instead of Ray keeping up to
    # num_cpus of them for good: starting one costs about 0.7 CPU-s, about what one costs
    # idling for a minute, so a worker that waits longer would have been cheaper to start
    # again (within a module's tests, workers are reused as before).
    "num_workers_soft_limit": 0,
    "idle_worker_killing_time_threshold_ms": 60_000,
    "enable_metrics_collection": False,
}
# Ray's log monitor lists the log directory before each read (10 times a second) while
# there are fewer than this many files; at 0 it lists it every 0.5 s and still reads the
# files it has 10 times a second (a new worker's first lines can reach the driver up to
# 0.4 s later): half of its CPU.
_SESSION_LOG_MONITOR_ENV = {"RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0"}


@pytest.fixture(scope="session")
def ray_session(aws_test_credentials):
    """A local Ray shared by every test of the session (each start costs seconds).

    Started after ``aws_test_credentials`` so that its workers inherit the fake S3
    credentials from this process's environment (not runtime_env, which Ray logs).
    """
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if not ray.is_initialized():
        # Workers import test modules (functions defined in tests pickle by reference),
        # so they need the repository on PYTHONPATH. It is set in the environment the
        # raylet starts with (its workers inherit it) and only while Ray starts: a
        # runtime_env={"env_vars": ...} would start every worker process through Ray's
        # setup_worker.py, which imports Ray once more before it execs the worker
        # (about 0.5 CPU-s more per worker process, thousands of them in a test run).
        # Ray's API server is not started (the engine's own local start does the same).
        from engine._internal.ray_runtime.node_patches import without_api_server

        with _env_while_ray_starts(
                PYTHONPATH=os.pathsep.join(p for p in [REPO, os.environ.get("PYTHONPATH")]
                                           if p),
                **_SESSION_LOG_MONITOR_ENV), without_api_server():
            ray.init(address="local", num_cpus=RAY_TEST_CPUS, include_dashboard=False,
                     configure_logging=False, log_to_driver=True,
                     _system_config=_SESSION_SYSTEM_CONFIG)
    yield ray
    ray.shutdown()


@pytest.fixture
def ray_start_4_cpus(ray_session):
    return ray_session


@pytest.fixture(scope="module")
def pooled_workers(ray_session):
    """The module's fits and tunes inside one ``engine.reuse_workers()`` block: a fit
    starts on the warm worker processes an earlier fit of the same shape finished with
    (no process start, no framework import again), and the block's end stops them. For
    modules whose tests check results, not how workers start, die or leak: put
    ``pytestmark = pytest.mark.usefixtures("pooled_workers")`` in the module. The
    engine resets a worker between fits (test_worker_reuse.py shows a fit cannot see
    the one before); each framework's fresh start stays covered by a module without it.
    """
    import engine

    with engine.reuse_workers() as pool:
        yield pool


@pytest.fixture
def fresh_workers(pooled_workers):
    """In a pooled module, a test about faults (a SIGKILLed worker) starts on fresh
    processes: the pool's idle workers are stopped first."""
    pooled_workers.evict_all()
    return pooled_workers


@pytest.fixture
def storage_path(tmp_path) -> str:
    path = tmp_path / "results"
    path.mkdir()
    return str(path)


_ALLOWED_ENV_CHANGES = {"RAY_DEDUP_LOGS", "PYTEST_CURRENT_TEST"}


@pytest.fixture(autouse=True)
def no_env_leak():
    """Fail a test that leaves environment variables changed in the test process."""
    before = dict(os.environ)
    yield
    after = dict(os.environ)
    changed = {k for k in set(before) | set(after)
               if before.get(k) != after.get(k)} - _ALLOWED_ENV_CHANGES
    # What an import sets once per process (tests/script_runner.PROCESS_ONCE_ENV).
    changed = {k for k in changed if not k.startswith(PROCESS_ONCE_ENV)}
    if changed:
        for key in changed:
            if key in before:
                os.environ[key] = before[key]
            else:
                os.environ.pop(key, None)
        pytest.fail(f"test leaked environment variables: {sorted(changed)}")


# --- S3 on loopback (moto's server mode) ----------------------------------------------
# A session-scoped fixture sets fake credentials once, before Ray starts, and restores
# the environment at session end. Session fixtures are set up before the function-scoped
# no_env_leak guard takes its snapshot and torn down after its last check, so the guard
# sees no change and needs no exemption for these names.
FAKE_AWS_SECRET = "tyFakeSecret-" + __import__("uuid").uuid4().hex
_FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "trainyard-test-key-id",
    "AWS_SECRET_ACCESS_KEY": FAKE_AWS_SECRET,
    "AWS_DEFAULT_REGION": "us-east-1",
}
# Unset for the session, so a developer's own AWS setup cannot reach the tests.
_AWS_ENV_CLEARED = ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL",
                    "AWS_ENDPOINT_URL_S3", "AWS_REGION")


@pytest.fixture(scope="session")
def aws_test_credentials():
    """Fake S3 credentials in os.environ for the whole session (driver and Ray workers)."""
    names = list(_FAKE_AWS_ENV) + list(_AWS_ENV_CLEARED)
    saved = {k: os.environ.get(k) for k in names}
    for k in _AWS_ENV_CLEARED:
        os.environ.pop(k, None)
    os.environ.update(_FAKE_AWS_ENV)
    yield dict(_FAKE_AWS_ENV)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class S3Server:
    """A moto S3 server on 127.0.0.1 in its own process (Ray workers reach it too)."""

    bucket = "trainyard-test"

    def __init__(self, port: int, process, log_path: str) -> None:
        self.port = port
        self.process = process
        self.log_path = log_path
        self.endpoint = f"127.0.0.1:{port}"
        self.endpoint_url = f"http://{self.endpoint}"

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url,
                            region_name=_FAKE_AWS_ENV["AWS_DEFAULT_REGION"],
                            aws_access_key_id=_FAKE_AWS_ENV["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=_FAKE_AWS_ENV["AWS_SECRET_ACCESS_KEY"])

    def uri(self, key: str, bucket: str = "") -> str:
        """``s3://bucket/key?endpoint_override=...&scheme=http`` for pyarrow/trainyard."""
        path = f"{bucket or self.bucket}/{key.strip('/')}".rstrip("/")
        return f"s3://{path}?endpoint_override={self.endpoint}&scheme=http"

    def keys(self, prefix: str = "", bucket: str = "") -> list:
        """Every object key under ``prefix`` (paginated)."""
        pages = self.client().get_paginator("list_objects_v2").paginate(
            Bucket=bucket or self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _free_port() -> int:
    """A port free now, for a server a test starts next: the engine's own draw, below
    the kernel's ephemeral range (and above Ray's worker ports, 10002-19999). A port the
    kernel handed out for port 0 could be taken by the next process that binds port 0
    (Ray's gRPC servers do, in other test processes) before the server binds it (CI: a
    Prefect server's port answered in HTTP/2, Ray's)."""
    from engine._internal.worker_group.worker import draw_free_port

    return draw_free_port()


def _wait_http(url: str, proc, timeout: float) -> bool:
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return True
        except urllib.error.HTTPError:
            return True  # it answers
        except OSError:
            time.sleep(0.1)
    return False


MOTO_SERVER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support",
                                  "moto_server.py")


def start_s3_server(log_dir, env=None) -> S3Server:
    """Start moto's S3 server (``tests/support/moto_server.py``: its conditional PUTs atomic, as
    on S3) on a free loopback port and create the test bucket; the caller stops it."""
    import subprocess

    proc = server = None
    for attempt in range(3):  # the free port can be taken between probe and bind
        port = _free_port()
        log_path = os.path.join(str(log_dir), f"moto_{attempt}.log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, MOTO_SERVER_SCRIPT, "-H", "127.0.0.1", "-p", str(port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env)
        if _wait_http(f"http://127.0.0.1:{port}/moto-api/", proc, timeout=60):
            server = S3Server(port, proc, log_path)
            break
        proc.kill()
        proc.wait()
    if server is None:
        pytest.fail(f"moto S3 server did not start; see {log_dir}")
    try:
        server.client().create_bucket(Bucket=server.bucket)
    except BaseException:
        stop_s3_server(server)
        raise
    return server


def stop_s3_server(server: S3Server) -> None:
    import subprocess

    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="session")
def s3_server(aws_test_credentials, tmp_path_factory):
    """A moto S3 server for the whole session, stopped at its end."""
    pytest.importorskip("moto.server", reason="moto[server] is needed for the S3 tests")
    server = start_s3_server(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        stop_s3_server(server)


@pytest.fixture
def s3_storage_path(s3_server, request):
    """A fresh prefix in the test bucket, as a storage_path URI with the endpoint."""
    import re
    import uuid

    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:40]
    return s3_server.uri(f"runs/{name}-{uuid.uuid4().hex[:8]}")
