"""A machine too busy for Ray's start: the raylet registers after Ray's own 30 s limit.

On a CPU-starved machine (the 2-core VM at a load average of 20; an orchestrator worker
running other tasks) Ray 2.60's ``ray.init()`` fails when the raylet has not registered
within 30 s, and a new start only repeats the same work under the same load. Here the
raylet of a real step is stopped (SIGSTOP) for longer than Ray waits, then let go: the step's
start waits for it and the fit runs, with one raylet and no second start."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from tests.support.subprocess_env import driver_env, thread_dump

STEP = """
import tempfile
from engine import RunConfig, ScalingConfig, report
from engine.trainer import DataParallelTrainer

def loop(config):
    report({"x": 1})

result = DataParallelTrainer(
    loop, scaling_config=ScalingConfig(num_workers=2),
    run_config=RunConfig(storage_path=tempfile.mkdtemp(), verbose=0)).fit()
print("RESULT", result.metrics["x"])
"""

# Past all Ray waits for: its 30 s, plus the retries of its GCS lookup of the node (a
# 40 s stall was still within them on 2026-11-29; at 90 s Ray's start failed).
STALL_S = 90


def _raylets(pid: int) -> list:
    """The raylet processes among ``pid``'s children (ray.init starts its raylet)."""
    found = []
    for child in psutil.Process(pid).children():
        try:
            if child.name() == "raylet":
                found.append(child)
        except psutil.Error:
            continue
    return found


@pytest.mark.timeout(300)
def test_a_raylet_stalled_past_rays_start_limit_is_waited_for(tmp_path):
    script = tmp_path / "step.py"
    script.write_text(STEP)
    proc = subprocess.Popen([sys.executable, str(script)], env=driver_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # Catch the raylet before it registers (that takes it about a second).
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.communicate()[0][-4000:]
            assert time.monotonic() < deadline, thread_dump(proc.pid)
            found = _raylets(proc.pid)
            if found:
                break
            time.sleep(0.005)
        raylet = found[0]
        raylets = {raylet.pid}
        raylet.suspend()
        stalled_at = time.monotonic()
        while time.monotonic() - stalled_at < STALL_S:
            raylets.update(r.pid for r in _raylets(proc.pid))  # a second start?
            time.sleep(0.5)
        try:
            raylet.resume()
        except psutil.NoSuchProcess:  # the start gave up on it and killed it
            pass
        out = proc.communicate(timeout=240)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-4000:]
    assert "RESULT 1" in out
    assert "has not registered within 30 s" in out and "waiting on while it runs" in out
    assert "starting it again" not in out, out[-4000:]
    assert len(raylets) == 1, raylets
