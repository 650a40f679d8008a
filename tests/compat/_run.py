"""Runs a Ray-style compat script as ``python SCRIPT`` would, in the test process
(tests/support/script_runner.py): on the session's Ray and the module's warm workers
(``pooled_workers``), where a process of its own would pay its interpreter, its imports
and its job's fresh workers first. The scripts in ``OWN_RAY`` are about how a script's
own local Ray starts, and run in their own process with none running; a script's own
process joining a running Ray is covered by tests/integration/test_examples.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.support.script_runner import last_line, run_in_process
from tests.support.subprocess_env import REPO, driver_env

HERE = Path(__file__).resolve().parent
SCRIPTS = sorted(p for p in HERE.glob("*.py") if not p.name.startswith(("test_", "_")))
# Tuner scripts: their own test module, so xdist (--dist loadfile) runs them beside the
# others instead of after them on one worker.
TUNE_SCRIPTS = {"bayesopt_search.py", "bohb_search.py", "hyperband_scheduler.py",
                "hyperopt_search.py", "pbt_synch.py", "search_space_in_config.py",
                "stop_tuner.py", "tune_run_legacy.py"}
# ray.data starts Ray before fit() does, with one logical CPU per core: that start is
# what the script checks.
OWN_RAY = {"data_before_fit.py"}


def scripts(tune: bool) -> List[Path]:
    """The compat scripts of one of the two test modules."""
    return [p for p in SCRIPTS if (p.name in TUNE_SCRIPTS) == tune]


def run_script(script: Path, tmp_path: Path) -> None:
    """Run ``script`` on this process's Ray (its own process and local Ray when it is
    in ``OWN_RAY``); fail with its output unless it ends well with ``OK`` printed last."""
    settings = {"TRAINYARD_STORAGE_PATH": str(tmp_path),
                "TRAINYARD_DISABLE_DEFAULT_LOGGERS": "0"}
    if script.name not in OWN_RAY:
        stdout = run_in_process(script, {**settings, "TORCHINDUCTOR_CACHE_DIR":
                                         str(tmp_path / "inductor")})["__stdout__"]
        assert last_line(stdout) == "OK", (
            f"{script.name} did not print OK last.\n--- stdout (tail) ---\n{stdout[-2000:]}")
        return
    env = {**driver_env(), **settings}
    try:
        proc = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=360)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) \
            else (exc.stderr or "")
        pytest.fail(f"{script.name} ran past 360 s.\n--- stderr (tail) ---\n{err[-4000:]}")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), (
        f"{script.name} exited with {proc.returncode}.\n--- stdout (tail) ---\n"
        f"{proc.stdout[-2000:]}\n--- stderr (tail) ---\n{proc.stderr[-5000:]}")
