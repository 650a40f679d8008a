"""The Ray Tune scripts of the compat suite (searchers, schedulers, stoppers, tune.run),
each run as ``python SCRIPT`` would run it, in this process on its Ray and warm workers:
see tests/compat/_run.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat._run import run_script, scripts

pytestmark = pytest.mark.usefixtures("pooled_workers")


@pytest.mark.timeout(400)
@pytest.mark.parametrize("script", scripts(tune=True), ids=lambda p: p.name)
def test_tune_script_runs(script: Path, tmp_path: Path, ray_session) -> None:
    run_script(script, tmp_path)
