"""The Ray Tune scripts of the compat suite (searchers, schedulers, stoppers, tune.run),
each run as a script in its own process on this process's Ray: see tests/compat/_run.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat._run import run_script, scripts


@pytest.mark.timeout(400)
@pytest.mark.parametrize("script", scripts(tune=True), ids=lambda p: p.name)
def test_tune_script_runs(script: Path, tmp_path: Path, ray_session) -> None:
    run_script(script, tmp_path, ray_session.get_runtime_context().gcs_address)
