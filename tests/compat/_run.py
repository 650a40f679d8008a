"""Runs a Ray-style compat script as a user would: its own process, joining the Ray of
the test process that runs it through ``RAY_ADDRESS`` (as a script on a cluster does),
except the scripts in ``OWN_RAY``, which are about how a script's own local Ray starts.
A local start costs 6-8 CPU-s of Ray's daemons and prestarted workers before any work;
joining costs one driver's connection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.subprocess_env import REPO, driver_env

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


def run_script(script: Path, tmp_path: Path, ray_address: str) -> None:
    """Run ``script`` on the Ray at ``ray_address`` (its own local Ray when it is in
    ``OWN_RAY``); fail with its output unless it exits 0 with ``OK`` last."""
    env = driver_env()
    if script.name not in OWN_RAY:
        env["RAY_ADDRESS"] = ray_address
    env["TRAINYARD_STORAGE_PATH"] = str(tmp_path)
    env["TRAINYARD_DISABLE_DEFAULT_LOGGERS"] = "0"
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
