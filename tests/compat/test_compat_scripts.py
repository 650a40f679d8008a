"""Ray Train/Tune scripts ported by rewriting their imports only: each runs as
``python SCRIPT`` would run it (in this process, on its Ray and warm workers:
tests/compat/_run.py) and asserts what a user would check. The Tuner's scripts are in
test_compat_tune_scripts.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat._run import OWN_RAY, SCRIPTS, TUNE_SCRIPTS, run_script, scripts

pytestmark = pytest.mark.usefixtures("pooled_workers")


def test_scripts_use_only_trainyard_imports() -> None:
    for script in SCRIPTS:
        text = script.read_text()
        assert "import ray" not in text and "from ray" not in text, script.name


def test_every_tune_script_exists() -> None:
    assert TUNE_SCRIPTS <= {p.name for p in SCRIPTS}
    assert OWN_RAY <= {p.name for p in SCRIPTS}


@pytest.mark.timeout(400)
@pytest.mark.parametrize("script", scripts(tune=False), ids=lambda p: p.name)
def test_script_runs(script: Path, tmp_path: Path, ray_session) -> None:
    run_script(script, tmp_path)
