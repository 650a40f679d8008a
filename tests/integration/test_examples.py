"""Every script in examples/ runs to completion (its own asserts check the outcome)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.py"))
SCRIPT_TIMEOUT_S = 360


# Hang guards, not speed checks (speed is bench/'s): the PPO example took 137 s of its
# former 180 on 2026-11-29, the VM's load average at 12-15; the compat scripts' limits.
@pytest.mark.timeout(400)
@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(script: Path, tmp_path: Path) -> None:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env["TRAINYARD_STORAGE_PATH"] = str(tmp_path)
    env["TRAINYARD_RAY_NUM_CPUS"] = "4"
    # Each script starts its own local Ray (engine.runtime.ensure_ray), in a temp dir of
    # its own, away from what other tests' Rays leave in /tmp/ray (a plain ray.init() or
    # ray.data there would join the cluster a `ray start` named in ray_current_cluster).
    # A short path: Ray's socket names must fit.
    ray_tmp = tempfile.mkdtemp(prefix="rayex", dir="/tmp")
    env["RAY_TMPDIR"] = ray_tmp
    try:
        proc = subprocess.run(
            [sys.executable, str(script.relative_to(REPO_ROOT))], cwd=REPO_ROOT, env=env,
            capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) \
            else (exc.stderr or "")
        pytest.fail(f"{script.name} ran past {SCRIPT_TIMEOUT_S} s.\n"
                    f"--- stderr (tail) ---\n{stderr[-4000:]}")
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, (
        f"{script.name} exited with {proc.returncode}.\n"
        f"--- stdout (tail) ---\n{proc.stdout[-2000:]}\n"
        f"--- stderr (tail) ---\n{proc.stderr[-4000:]}"
    )


def test_examples_found() -> None:
    assert EXAMPLES, f"no scripts found in {REPO_ROOT / 'examples'}"
