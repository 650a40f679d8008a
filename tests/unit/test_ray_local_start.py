"""A local Ray start that times out on a busy machine (Ray gives its raylet a fixed 30 s
to register) is cleaned up and tried once more; nothing else is retried, and processes
that are not Ray's are left alone. Ray's ``init`` is replaced here: what it leaves
behind is played by real child processes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import psutil
import pytest

from engine._internal import ray_utils

TIMEOUT_TEXT = ("The current node timed out during startup. This could happen because "
                "some of the raylet failed to startup or the GCS has become overloaded.")


def _sleeper(*extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *extra])


@pytest.fixture
def fake_start(monkeypatch):
    import ray

    calls = []
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_utils, "_started_here", False)
    monkeypatch.setattr(ray_utils.atexit, "register", lambda fn: fn)

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
            ray_utils._init_ray()
        assert len(calls) == 2 and calls[0] == calls[1]
        assert calls[1]["address"] == "local"
        # Killed and reaped before the second start (by the engine, so its exit status
        # is not this Popen's to read).
        assert not psutil.pid_exists(left[0].pid)
        assert users_own.poll() is None
        assert "timed out during startup" in caplog.text and "attempt 2 of 3" in caplog.text
        assert ray_utils.started_by_trainyard()
    finally:
        for proc in [users_own] + left:
            proc.kill()
            proc.wait()


def test_the_last_timeout_is_raised(fake_start):
    def always_times_out(n):
        raise Exception(TIMEOUT_TEXT)

    calls = fake_start(always_times_out)
    with pytest.raises(Exception, match="timed out during startup"):
        ray_utils._init_ray()
    assert len(calls) == ray_utils.LOCAL_START_ATTEMPTS == 3
    assert not ray_utils.started_by_trainyard()


def test_other_start_errors_are_not_retried(fake_start):
    def bad(n):
        raise ValueError("num_cpus must be positive")

    calls = fake_start(bad)
    with pytest.raises(ValueError, match="num_cpus"):
        ray_utils._init_ray()
    assert len(calls) == 1
