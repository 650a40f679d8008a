"""A local Ray start that times out on a busy machine (Ray gives its raylet a fixed 30 s
to register) is cleaned up and tried once more; nothing else is retried, and processes
that are not Ray's are left alone. Ray's ``init`` is replaced here: what it leaves
behind is played by real child processes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import psutil
import pytest

from engine._internal.ray_runtime import instance
from engine._internal.ray_runtime import logs as ray_logs
from engine._internal.ray_runtime import monitor, node_patches, settings, signals, start

TIMEOUT_TEXT = ("The current node timed out during startup. This could happen because "
                "some of the raylet failed to startup or the GCS has become overloaded.")


def _sleeper(*extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *extra])


@pytest.fixture
def fake_start(monkeypatch):
    import ray

    calls = []
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(instance, "_started_here", False)
    monkeypatch.setattr(start.atexit, "register", lambda fn: fn)

    def install(behaviour):
        def fake_init(**kwargs):
            calls.append(kwargs)
            behaviour(len(calls))
        monkeypatch.setattr(ray, "init", fake_init)
        return calls

    return install


def test_a_timed_out_start_is_cleaned_up_and_retried(fake_start, caplog):
    users_own = _sleeper()  # started before: not Ray's, must survive
    left = []

    def first_times_out(n):
        if n == 1:
            # What the failed start leaves running: a Ray process of this process's.
            left.append(_sleeper(os.path.join("site-packages", "ray", "_private",
                                              "log_monitor.py")))
            raise Exception(TIMEOUT_TEXT)

    calls = fake_start(first_times_out)
    try:
        with caplog.at_level(logging.WARNING, logger="engine"):
            start._init_ray()
        assert len(calls) == 2 and calls[0] == calls[1]
        assert calls[1]["address"] == "local"
        # Killed and reaped before the second start (by the engine, so its exit status
        # is not this Popen's to read).
        assert not psutil.pid_exists(left[0].pid)
        assert users_own.poll() is None
        assert "timed out during startup" in caplog.text and "attempt 2 of 3" in caplog.text
        assert instance.started_by_trainyard()
    finally:
        for proc in [users_own] + left:
            proc.kill()
            proc.wait()


def test_the_last_timeout_is_raised(fake_start):
    def always_times_out(n):
        raise Exception(TIMEOUT_TEXT)

    calls = fake_start(always_times_out)
    with pytest.raises(Exception, match="timed out during startup"):
        start._init_ray()
    assert len(calls) == start.LOCAL_START_ATTEMPTS == 3
    assert not instance.started_by_trainyard()


def test_other_start_errors_are_not_retried(fake_start):
    def bad(n):
        raise ValueError("num_cpus must be positive")

    calls = fake_start(bad)
    with pytest.raises(ValueError, match="num_cpus"):
        start._init_ray()
    assert len(calls) == 1


@pytest.fixture
def background_start(monkeypatch):
    """ensure_ray(background=True) with Ray's init played by a function that waits for
    the test's go-ahead; ray.is_initialized() is true once an init has returned."""
    import threading

    import ray

    started = threading.Event()
    monkeypatch.setattr(start, "_background_thread", None)
    monkeypatch.setattr(ray, "is_initialized", started.is_set)
    handlers = []
    import ray._private.utils as ray_private_utils
    monkeypatch.setattr(ray_private_utils, "set_sigterm_handler", handlers.append)

    def install(init):
        def fake_init_ray():
            init()
            started.set()
        monkeypatch.setattr(start, "_init_ray", fake_init_ray)
        return started, handlers

    return install


def test_a_background_start_returns_at_once_and_fit_waits_for_it(background_start):
    import threading
    import time

    go = threading.Event()
    calls = []

    def slow():
        calls.append(threading.current_thread().name)
        go.wait(10)

    started, handlers = background_start(slow)
    t0 = time.monotonic()
    start.ensure_ray(background=True)
    assert time.monotonic() - t0 < 1.0 and not started.is_set()
    start.ensure_ray(background=True)  # a second request starts nothing more
    waiter = threading.Thread(target=start.ensure_ray)  # what fit() calls
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive(), "the plain call must wait for the background start"
    go.set()
    waiter.join(10)
    assert started.is_set() and not waiter.is_alive()
    assert calls == ["trainyard-ray-start"]  # one start, in the background thread
    # Called from the main thread: Ray's own SIGTERM handler (exit through Ray's
    # shutdown), which ray.init() sets only when it runs in the main thread.
    assert handlers == [signals._exit_on_sigterm]


def test_a_failed_background_start_is_raised_by_the_next_call(background_start):
    attempts = []

    def fails_once():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("raylet missed its registration")
        raise RuntimeError("still failing: port 6379 in use")

    background_start(fails_once)
    start.ensure_ray(background=True)
    start._background_thread.join(10)
    with pytest.raises(RuntimeError, match="port 6379 in use"):
        start.ensure_ray()  # starts again itself and raises in the caller's thread
    assert len(attempts) == 2


def test_the_start_sees_the_raylets_registration_as_it_happens(monkeypatch):
    """Ray's own lookup of the new node retries once a second; the engine first polls
    the GCS's node table, so Ray's lookup (still the one that answers) runs once the
    node is there. Ray's lookup is restored after the start."""
    import ray._private.services as services
    from ray._private.state import GlobalState

    tables = [[], [{"NodeID": "other"}], [{"NodeID": "n1"}]]
    polls, lookups = [], []
    monkeypatch.setattr(GlobalState, "_initialize_global_state", lambda self, options: None)
    monkeypatch.setattr(GlobalState, "disconnect", lambda self: None)
    monkeypatch.setattr(GlobalState, "node_table",
                        lambda self: polls.append(1) or tables[min(len(polls), 3) - 1])
    monkeypatch.setattr(services, "_get_gcs_client_options", lambda address: address)

    def ray_lookup(gcs_address, node_id):
        lookups.append((gcs_address, node_id, len(polls)))
        return {"node_id": node_id}

    monkeypatch.setattr(services, "get_node", ray_lookup)
    with node_patches.prompt_registration_wait():
        assert services.get_node("127.0.0.1:6379", "n1") == {"node_id": "n1"}
    assert lookups == [("127.0.0.1:6379", "n1", 3)]  # after the poll that saw it
    assert services.get_node is ray_lookup


def _fake_registration(monkeypatch, tables):
    """The GCS's node table answering ``tables(poll)``; Ray's own lookup, which raises as
    Ray's does while the node is missing. Returns the polls and Ray's lookups."""
    import ray._private.services as services
    from ray._private.state import GlobalState

    polls, lookups = [], []
    monkeypatch.setattr(GlobalState, "_initialize_global_state", lambda self, options: None)
    monkeypatch.setattr(GlobalState, "disconnect", lambda self: None)
    monkeypatch.setattr(GlobalState, "node_table",
                        lambda self: polls.append(1) or tables(len(polls)))
    monkeypatch.setattr(services, "_get_gcs_client_options", lambda address: address)

    def ray_lookup(gcs_address, node_id):
        lookups.append(len(polls))
        if tables(len(polls)):
            return {"node_id": node_id}
        raise RuntimeError("node not found")  # as Ray 2.60's lookup when it is missing

    monkeypatch.setattr(services, "get_node", ray_lookup)
    monkeypatch.setattr(node_patches, "_REGISTRATION_WAIT_S", 0.2)  # Ray's 30 s, scaled
    monkeypatch.setattr(node_patches, "_REGISTRATION_WAIT_ALIVE_S", 30.0)
    return services, polls, lookups


def test_a_slow_raylet_that_still_runs_is_waited_for_past_rays_limit(monkeypatch, caplog):
    """On a CPU-starved machine the raylet can need more than Ray's 30 s to register;
    ray.init() would fail and a new start repeat the same work. While the raylet the
    start launched runs, the lookup waits on and the start succeeds."""
    services, polls, lookups = _fake_registration(
        monkeypatch, lambda poll: [{"NodeID": "n1"}] if poll >= 12 else [])
    alive_asked = []
    monkeypatch.setattr(node_patches, "_raylet_alive",
                        lambda before: alive_asked.append(before) or True)
    with caplog.at_level("WARNING", logger=node_patches.logger.name), \
            node_patches.prompt_registration_wait(frozenset({11})):
        assert services.get_node("127.0.0.1:6379", "n1") == {"node_id": "n1"}
    assert lookups == [12]  # Ray's lookup ran once, after the poll that saw the node
    assert alive_asked and all(b == frozenset({11}) for b in alive_asked)
    assert "not registered within 0 s" in caplog.text and "waiting on" in caplog.text


def test_a_raylet_that_died_is_not_waited_for(monkeypatch):
    """Past Ray's limit, a raylet that is gone ends the wait at once: Ray's lookup then
    fails as it would have (and the start's retry takes over)."""
    services, polls, lookups = _fake_registration(monkeypatch, lambda poll: [])
    monkeypatch.setattr(node_patches, "_raylet_alive", lambda before: False)
    t0 = time.monotonic()
    with node_patches.prompt_registration_wait(), pytest.raises(RuntimeError, match="not found"):
        services.get_node("127.0.0.1:6379", "n1")
    assert time.monotonic() - t0 < 10  # not _REGISTRATION_WAIT_ALIVE_S (30 s here)
    assert len(lookups) == 1


def test_raylet_alive_sees_only_a_raylet_this_start_launched(tmp_path):
    """``_raylet_alive`` looks at this process's children named raylet, not at those
    that were there before the start, and not at one that has exited."""
    import shutil

    fake = tmp_path / "raylet"  # a process whose name is "raylet"
    shutil.copy(shutil.which("sleep"), fake)
    # This process's children so far (the test session's own Ray has a raylet).
    before = frozenset(p.pid for p in psutil.Process().children())
    assert not node_patches._raylet_alive(before)
    proc = subprocess.Popen([str(fake), "30"])
    try:
        assert node_patches._raylet_alive(before)
        assert not node_patches._raylet_alive(before | {proc.pid})
        proc.kill()
        time.sleep(0.2)  # exited, not yet reaped: a zombie is not a running raylet
        assert not node_patches._raylet_alive(before)
    finally:
        proc.kill()
        proc.wait()
    assert not node_patches._raylet_alive(before)


@pytest.mark.parametrize("handler", ["engine", "ray_job_entry"])
def test_the_sigterm_handlers_cancel_the_abort_rays_core_worker_arms(handler):
    """Ray's core worker answers SIGTERM with a 3 s alarm() that aborts the process; the
    handlers that end a driver (the engine's) or a Ray job's step (its entry point) cancel
    it, so that a slow exit is not cut short by SIGABRT."""
    import signal

    from tasks.ray_jobs import entry as _job_entry

    signal.alarm(600)  # what Abseil's failure-signal handler did (with 3 s)
    try:
        if handler == "engine":
            with pytest.raises(SystemExit) as exc:
                signals._exit_on_sigterm(signal.SIGTERM, None)
            assert exc.value.code == signal.SIGTERM
        else:
            with pytest.raises(KeyboardInterrupt, match="the Ray job was stopped"):
                _job_entry._interrupt(signal.SIGTERM, None)
    finally:
        remaining = signal.alarm(0)  # what was left of it, and cancelled
    assert remaining == 0, "the handler left the pending abort armed"


def test_a_foreground_start_in_the_main_thread_replaces_only_rays_sigterm_handler(
        monkeypatch):
    import signal

    import ray

    def rays(signum, frame):  # stands for the handler ray.init() installed
        pass
    rays.__module__ = "ray._private.worker"

    def users(signum, frame):
        pass

    for installed, expected in ((rays, signals._exit_on_sigterm), (users, users)):
        previous = signal.getsignal(signal.SIGTERM)
        ready = []
        monkeypatch.setattr(ray, "is_initialized", lambda: bool(ready))
        monkeypatch.setattr(start, "_init_ray",
                            lambda h=installed: (signal.signal(signal.SIGTERM, h),
                                                 ready.append(1)))
        try:
            start.ensure_ray()
            assert signal.getsignal(signal.SIGTERM) is expected
        finally:
            signal.signal(signal.SIGTERM, previous)


def test_the_exit_waits_until_rays_log_monitor_has_streamed_the_workers_output(
        tmp_path, monkeypatch):
    """What the exit's wait for the console (instead of Ray's fixed 0.5 s) looks at: the
    files Ray streams, how far Ray's log monitor has read those it holds open (its file
    offsets in /proc), and when the driver last received a batch."""
    import os
    import time

    monkeypatch.setattr(ray_logs._LOG_CLOCK, "last", 0.0)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "raylet.out").write_text("Ray's own log, not streamed\n")
    out = logs / "worker-abc-01000000-4242.out"
    out.write_text("epoch 1\nepoch 2\n")
    now = time.time()

    def quiet(monitor_pid=None):
        return ray_logs._logs_quiet(str(logs), monitor_pid, time.time(), time.monotonic())

    assert not quiet(), "a worker file written just now, not opened by the monitor"
    os.utime(out, (now - 5, now - 5))
    assert quiet(), "unchanged for 5 s and nothing in flight"

    # This process plays the log monitor, holding the file open part-way through.
    with open(out, "rb", buffering=0) as monitor_view:
        monitor_view.read(4)
        assert not quiet(os.getpid()), "the monitor has not read the file to its end"
        monitor_view.read()
        assert quiet(os.getpid())
        (logs / "gcs_server.err").write_text("a GCS error the console must show\n")
        assert not quiet(os.getpid())
        os.utime(logs / "gcs_server.err", (now - 5, now - 5))
        assert quiet(os.getpid())
        ray_logs._LOG_CLOCK._seen({"lines": ["x"]})
        assert not quiet(os.getpid()), "a batch just arrived: more may be in flight"


def test_a_bad_seconds_setting_fails_the_start_naming_it_and_the_exit_keeps_its_wait(
        monkeypatch):
    """Both are read as the local start begins: a bad value is one SettingError naming
    the variable (before any Ray process starts); the exit then waits what the start
    read (an exit handler could only swallow the error)."""
    from engine.exceptions import SettingError

    monkeypatch.setattr(settings, "_exit_log_wait", None)
    monkeypatch.delenv("TRAINYARD_RAY_EXIT_LOG_WAIT_S", raising=False)
    monkeypatch.setenv("TRAINYARD_RAY_MONITOR_DELAY_S", "2.5")
    assert settings.read_at_start() == 2.5 and settings.exit_log_wait_s() == 0.5
    monkeypatch.setenv("TRAINYARD_RAY_EXIT_LOG_WAIT_S", "2")
    monkeypatch.setenv("TRAINYARD_RAY_MONITOR_DELAY_S", "0")
    assert settings.read_at_start() == 0.0
    monkeypatch.setenv("TRAINYARD_RAY_EXIT_LOG_WAIT_S", "half a second")
    assert settings.exit_log_wait_s() == 2.0  # what the start read
    for name, bad in (("TRAINYARD_RAY_EXIT_LOG_WAIT_S", "half a second"),
                      ("TRAINYARD_RAY_MONITOR_DELAY_S", "-1")):
        monkeypatch.setenv("TRAINYARD_RAY_EXIT_LOG_WAIT_S", "0.5")
        monkeypatch.setenv(name, bad)
        with pytest.raises(SettingError, match=f"{name}={bad!r}.*>= 0"):
            settings.read_at_start()
    monkeypatch.delenv("TRAINYARD_RAY_MONITOR_DELAY_S")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local start, not a join
    monkeypatch.setenv("TRAINYARD_RAY_NUM_CPUS", "four")
    before = set(psutil.Process().children(recursive=True))
    with pytest.raises(SettingError, match="TRAINYARD_RAY_NUM_CPUS='four'"):
        start._init_ray()
    assert set(psutil.Process().children(recursive=True)) <= before


def test_the_sweep_moves_only_the_logs_of_workers_that_are_gone(tmp_path):
    """Dead workers' output and core worker logs, unchanged for a minute, go to old/;
    a live worker's, a recent file, the driver's and Ray's own logs stay."""
    logs = tmp_path / "logs"
    logs.mkdir()
    names = {
        "worker-2f02d4052d6007ca-01000000-101.out": "moved",   # dead, quiet
        "worker-2f02d4052d6007ca-01000000-101.err": "moved",
        "python-core-worker-2f02d4052d6007ca_101.log": "moved",
        "worker-5b6053a03e83b1f3-01000000-102.out": "stays",   # dead, written just now
        "worker-77aa-ffffffff-103.err": "stays",              # alive
        "python-core-worker-77aa_103.log": "stays",
        "python-core-driver-01000000ffff_104.log": "stays",   # the driver's
        "raylet.err": "stays", "gcs_server.out": "stays", "log_monitor.log": "stays",
    }
    now = 1_000_000.0
    for name in names:
        (logs / name).write_text("line\n")
        os.utime(logs / name, (now - 120, now - 120))
    os.utime(logs / "worker-5b6053a03e83b1f3-01000000-102.out", (now - 5, now - 5))

    moved = ray_logs.sweep_worker_logs(str(logs), now=now, alive=lambda pid: pid == 103)

    assert moved == 3
    assert {p.name for p in (logs / "old").iterdir()} == {
        n for n, fate in names.items() if fate == "moved"}
    assert {p.name for p in logs.iterdir() if p.is_file()} == {
        n for n, fate in names.items() if fate == "stays"}
    assert (logs / "old" / "worker-2f02d4052d6007ca-01000000-101.out").read_text() == "line\n"
    # Once worker 103 is gone too, its two files follow; the recent one still stays.
    assert ray_logs.sweep_worker_logs(str(logs), now=now, alive=lambda pid: False) == 2
    assert (logs / "worker-5b6053a03e83b1f3-01000000-102.out").exists()
    assert ray_logs.sweep_worker_logs(str(tmp_path / "nowhere")) == 0  # no error


def test_a_worker_that_exited_but_is_not_reaped_yet_counts_as_gone():
    """A worker that has exited stays a zombie until the raylet reaps it, which on a
    loaded machine takes a while: its log files are final and are swept all the same
    (a full run under load found such a worker's files left in place)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # exited, not reaped: we have not waited
            with open(f"/proc/{child.pid}/stat") as f:
                if f.read().rsplit(") ", 1)[1][0] == "Z":
                    break
            time.sleep(0.05)
        assert not ray_logs._pid_alive(child.pid)
        assert ray_logs._pid_alive(os.getpid())
    finally:
        child.wait()
    assert not ray_logs._pid_alive(child.pid)  # reaped: gone


def test_the_sweep_after_a_fit_runs_only_on_our_own_instance_and_once_a_minute(monkeypatch):
    calls = []
    monkeypatch.setattr(ray_logs, "sweep_worker_logs", lambda d: calls.append(d))
    monkeypatch.setattr(ray_logs, "_last_sweep", 0.0)
    monkeypatch.setattr(ray_logs.time, "monotonic", lambda: 1000.0)
    monkeypatch.setattr(instance, "_started_here", False)
    ray_logs.sweep_worker_logs_if_due()
    assert calls == []  # a Ray the user started is the user's
    import ray

    class Node:
        def get_logs_dir_path(self):
            return "/session/logs"

    monkeypatch.setattr(ray._private.worker, "_global_node", Node())
    monkeypatch.setattr(instance, "_started_here", True)
    ray_logs.sweep_worker_logs_if_due()
    ray_logs.sweep_worker_logs_if_due()  # the same minute
    assert calls == ["/session/logs"]
    monkeypatch.setattr(ray_logs.time, "monotonic",
                        lambda: 1000.0 + ray_logs.WORKER_LOGS_SWEEP_AFTER_S)
    ray_logs.sweep_worker_logs_if_due()
    assert calls == ["/session/logs"] * 2


def _deferred(monkeypatch, delay_s):
    """A _DeferredMonitor for a stand-in node that is Ray's current one; returns it, the
    node and the list of nodes it started a monitor for."""
    node = object()
    monkeypatch.setattr(monitor, "_current_node", lambda: node)
    started = []
    return monitor._DeferredMonitor(node, started.append, delay_s), node, started


def test_the_deferred_monitor_starts_after_its_delay_for_the_running_instance(
        monkeypatch):
    deferred, node, started = _deferred(monkeypatch, 0.3)
    assert started == []  # not at once
    deadline = time.monotonic() + 60
    while not deferred.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started == [node] and deferred.started
    assert deferred._thread.is_alive()  # the monitor shares this thread's fate


def test_the_deferred_monitor_never_starts_once_the_process_exits(monkeypatch):
    deferred, _, started = _deferred(monkeypatch, 0.3)
    deferred.cancel()  # the exit handler, before the delay is up
    deferred._thread.join(timeout=60)
    assert not deferred._thread.is_alive()
    assert started == [] and not deferred.started


def test_the_deferred_monitor_never_starts_for_an_instance_shut_down_before(monkeypatch):
    deferred, _, started = _deferred(monkeypatch, 0.3)
    monkeypatch.setattr(monitor, "_current_node", lambda: None)  # ray.shutdown()
    deferred._thread.join(timeout=60)
    assert not deferred._thread.is_alive()
    assert started == [] and not deferred.started


def test_the_deferred_monitor_is_reniced_never_lower_and_a_gone_one_is_left_alone():
    """The deferred monitor runs at RAY_MONITOR_NICENESS; a process already nicer keeps
    its niceness (an unprivileged user could not lower it again), and one that has
    already exited is no error."""
    code = "import sys; sys.stdin.read()"
    plain = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    nicer = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", code],
                             stdin=subprocess.PIPE)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        # `nice` sets its niceness after it started: renicing before that raced it
        # (CI: 10 read back, as `nice` had not yet raised it when it was checked).
        deadline = time.monotonic() + 30
        while os.getpriority(os.PRIO_PROCESS, nicer.pid) != 19 and time.monotonic() < deadline:
            time.sleep(0.01)
        monitor._lower_priority([plain.pid, nicer.pid, gone.pid], 10)
        assert os.getpriority(os.PRIO_PROCESS, plain.pid) == max(10, os.nice(0))
        assert os.getpriority(os.PRIO_PROCESS, nicer.pid) == 19
    finally:
        for proc in (plain, nicer):
            proc.stdin.close()
            proc.wait(timeout=60)


@pytest.mark.parametrize("version, inside", [
    ("2.60.0", True), ("2.60.3", True), ("2.59.9", False), ("2.61.0", False),
    ("3.0.0.dev0", False)])
def test_the_private_api_guard_warns_once_outside_the_versions_it_was_checked_against(
        monkeypatch, caplog, version, inside):
    import ray

    from engine._internal.ray_runtime import versions

    monkeypatch.setattr(ray, "__version__", version)
    monkeypatch.setattr(versions, "_warned", set())
    with caplog.at_level(logging.WARNING, logger=versions.logger.name):
        assert versions.written_for("a test feature") is inside
        assert versions.written_for("a test feature") is inside
    warnings = [r for r in caplog.records if "a test feature" in r.getMessage()]
    assert len(warnings) == (0 if inside else 1)
    if not inside:
        assert version in warnings[0].getMessage() and "2.60.0" in warnings[0].getMessage()


def test_outside_the_checked_versions_rays_node_is_left_unpatched(monkeypatch):
    import ray
    from ray._private.node import Node

    from engine._internal.ray_runtime import versions

    original = Node.start_api_server
    monkeypatch.setattr(ray, "__version__", "9.0.0")
    monkeypatch.setattr(versions, "_warned", set())
    with node_patches.without_api_server():
        assert Node.start_api_server is original
    assert start._system_config(0) == {"worker_niceness": 0}
    assert instance.current_node() is None
