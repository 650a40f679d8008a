"""Runs a Ray-style compat script as a user would: its own process, its own local Ray."""

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


def scripts(tune: bool) -> List[Path]:
    """The compat scripts of one of the two test modules."""
    return [p for p in SCRIPTS if (p.name in TUNE_SCRIPTS) == tune]


def run_script(script: Path, tmp_path: Path) -> None:
    """Run ``script``; fail with its output unless it exits 0 with ``OK`` last."""
    env = driver_env()
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
