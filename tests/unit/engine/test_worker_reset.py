"""engine._internal.worker_group.reset in this process (no Ray): what a reused worker gets
back before its next fit, and which backends' workers may be reused at all."""

from __future__ import annotations

import os
import sys

import pytest

from engine._internal.worker_group import reset as worker_reset


@pytest.fixture
def snapshot_now(monkeypatch):
    """A snapshot as the actor takes at start; put back afterwards, so that no later
    reset in this process restores this test's environment."""
    monkeypatch.setattr(worker_reset, "_snapshot", None)
    worker_reset.snapshot()


def test_env_cwd_and_user_modules_are_restored(snapshot_now, tmp_path, monkeypatch):
    start = os.getcwd()
    (tmp_path / "fit_module_probe.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fit_module_probe  # noqa: F401 - a user's module the fit imports

    import json.tool  # noqa: F401 - the standard library stays loaded
    os.environ["WORKER_RESET_TEST_PROBE"] = "set by the fit"
    os.chdir(tmp_path)

    assert worker_reset.reset_process() is None
    assert "WORKER_RESET_TEST_PROBE" not in os.environ
    assert os.getcwd() == start
    assert "fit_module_probe" not in sys.modules
    assert "json.tool" in sys.modules


def test_the_engines_own_modules_are_not_the_users():
    """A reset drops the user's modules, never the engine's: their state outlives a fit
    (the TensorFlow backend counts fits there to draw each strategy's collective keys;
    dropped, the next fit on the same workers reused the last one's keys and failed
    "Shape mismatch in the collective instance")."""
    import engine.tensorflow.config  # noqa: F401 - loaded in every TensorFlow worker

    kept = worker_reset._kept_roots()
    engine_modules = [m for name, m in list(sys.modules.items())
                      if (name == "engine" or name.startswith("engine.")) and m is not None]
    assert len(engine_modules) > 10
    users = [m.__name__ for m in engine_modules if worker_reset._is_user_module(m, kept)]
    assert users == []


def test_an_unclean_step_says_why(snapshot_now, monkeypatch):
    monkeypatch.setattr(worker_reset, "_PROCESS_STATE",
                        (lambda: "the framework is still up",))
    assert worker_reset.reset_process() == "the framework is still up"


def test_only_configs_that_say_so_are_reusable():
    from engine._internal.worker_group.backend import BackendConfig
    from engine._internal.worker_group.pool import resettable
    from engine.lightgbm.config import LightGBMConfig
    from engine.tensorflow.config import TensorflowConfig

    class UsersOwn(BackendConfig):
        pass

    assert resettable(BackendConfig()) and resettable(TensorflowConfig())
    assert resettable(LightGBMConfig())
    assert not resettable(UsersOwn()) and not resettable(None)
