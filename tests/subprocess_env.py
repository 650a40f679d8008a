"""The environment for a driver subprocess that tests start (and may SIGKILL)."""

from __future__ import annotations

import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def driver_env() -> dict:
    """This process's environment for a fresh driver: its own local Ray with 4 logical
    CPUs (no RAY_ADDRESS), and the repository importable."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env["TRAINYARD_RAY_NUM_CPUS"] = "4"
    env["PYTHONPATH"] = os.pathsep.join(p for p in [REPO, env.get("PYTHONPATH")] if p)
    return env
