"""Every script in examples/ runs to completion (its own asserts check the outcome).

Most scripts run in this test process (tests/support/script_runner.py: as ``__main__``, the
script's argv, path, environment and working directory), on the session's Ray and the
module's warm workers (``pooled_workers``): a script's own process would cost its
interpreter, its framework's import and its job's fresh workers, about 10 CPU-s, before
its work. Three ways stay covered in their own process: ``OWN_RAY``, the first script of
the README, starts its own local Ray as a new user's first run does
(tests/unit/engine/test_ray_local_start.py covers that start in detail); ``JOINED`` is a
script's own process joining a running Ray through ``RAY_ADDRESS``, as on a cluster;
and a TensorFlow script runs in its own process once RLlib is loaded here (RLlib's
first import turns TensorFlow 2 behaviour off in its process). ``RUN_ELSEWHERE`` names
the test that runs a script and checks its result further, so that the same training is
not paid for twice.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.script_runner import run_in_process

pytestmark = pytest.mark.usefixtures("pooled_workers")

REPO_ROOT = Path(__file__).resolve().parents[2]
ALL_EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.py"))
OWN_RAY = {"torch_trainer.py"}
JOINED = {"xgboost_trainer.py"}
RUN_ELSEWHERE = {"rllib_ppo_cartpole.py": "tests/integration/test_rllib.py"}
EXAMPLES = [p for p in ALL_EXAMPLES if p.name not in RUN_ELSEWHERE]
SCRIPT_TIMEOUT_S = 360


# Hang guards, not speed checks (speed is bench/'s): the PPO example took 137 s of its
# former 180 on 2026-11-29, the VM's load average at 12-15; the compat scripts' limits.
@pytest.mark.timeout(400)
@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(script: Path, tmp_path: Path, ray_session, pooled_workers) -> None:
    if script.name not in OWN_RAY | JOINED and not _needs_own_process(script):
        # Its torch compiler cache in the test's directory, as in a process of its own.
        run_in_process(script, {"TRAINYARD_STORAGE_PATH": str(tmp_path),
                                "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
        return
    pooled_workers.evict_all()  # their placement groups would leave a joining script no CPU
    env = dict(os.environ)
    env["TRAINYARD_STORAGE_PATH"] = str(tmp_path)
    ray_tmp = tempfile.mkdtemp(prefix="rayex", dir="/tmp")
    if script.name in OWN_RAY:
        env.pop("RAY_ADDRESS", None)
        env["TRAINYARD_RAY_NUM_CPUS"] = "4"
        # Its own local Ray (engine.runtime.ensure_ray), in a temp dir of its own, away
        # from what other tests' Rays leave in /tmp/ray (a plain ray.init() or ray.data
        # there would join the cluster a `ray start` named in ray_current_cluster). A
        # short path: Ray's socket names must fit.
        env["RAY_TMPDIR"] = ray_tmp
    else:
        env["RAY_ADDRESS"] = ray_session.get_runtime_context().gcs_address
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


def _needs_own_process(script: Path) -> bool:
    return "ray.rllib" in sys.modules and "tensorflow" in script.read_text()


def test_examples_found() -> None:
    assert EXAMPLES, f"no scripts found in {REPO_ROOT / 'examples'}"
    names = {p.name for p in ALL_EXAMPLES}
    assert OWN_RAY <= names and JOINED <= names and set(RUN_ELSEWHERE) <= names
    for script, module in RUN_ELSEWHERE.items():  # still run, by the test named
        assert f"examples/{script}" in (REPO_ROOT / module).read_text(), (script, module)
