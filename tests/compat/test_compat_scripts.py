"""Ray Train/Tune scripts ported by rewriting their imports only: each runs as a script
in its own process (its own local Ray) and asserts what a user would check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.subprocess_env import REPO, driver_env

HERE = Path(__file__).resolve().parent
SCRIPTS = sorted(p for p in HERE.glob("*.py") if not p.name.startswith(("test_", "__")))


def test_scripts_use_only_trainyard_imports() -> None:
    for script in SCRIPTS:
        text = script.read_text()
        assert "import ray" not in text and "from ray" not in text, script.name


@pytest.mark.timeout(400)
@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_runs(script: Path, tmp_path: Path) -> None:
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
