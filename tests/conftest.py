"""Shared fixtures: one local Ray per test session, env-leak guard, GPU skips."""

from __future__ import annotations

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

# Ray's logical CPUs are not cores: give Ray Data room beside 2 training workers.
RAY_TEST_CPUS = 6


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run on a GPU machine (marker 'gpu')")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray shared by every test of the session (each start costs seconds)."""
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if not ray.is_initialized():
        # Workers import test modules (functions defined in tests pickle by reference).
        pythonpath = os.pathsep.join(p for p in [REPO, os.environ.get("PYTHONPATH")] if p)
        ray.init(num_cpus=RAY_TEST_CPUS, include_dashboard=False, configure_logging=False,
                 _node_ip_address="127.0.0.1", log_to_driver=True,
                 runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
    yield ray
    ray.shutdown()


@pytest.fixture
def ray_start_4_cpus(ray_session):
    return ray_session


@pytest.fixture
def storage_path(tmp_path) -> str:
    path = tmp_path / "results"
    path.mkdir()
    return str(path)


_ALLOWED_ENV_CHANGES = {"RAY_DEDUP_LOGS", "PYTEST_CURRENT_TEST"}


@pytest.fixture(autouse=True)
def no_env_leak():
    """Fail a test that leaves environment variables changed in the test process."""
    before = dict(os.environ)
    yield
    after = dict(os.environ)
    changed = {k for k in set(before) | set(after)
               if before.get(k) != after.get(k)} - _ALLOWED_ENV_CHANGES
    # Ray's own variables, and the OpenMP ones that importing torch sets once per process.
    changed = {k for k in changed if not k.startswith(("RAY_", "__RAY", "KMP_"))}
    if changed:
        for key in changed:
            if key in before:
                os.environ[key] = before[key]
            else:
                os.environ.pop(key, None)
        pytest.fail(f"test leaked environment variables: {sorted(changed)}")
