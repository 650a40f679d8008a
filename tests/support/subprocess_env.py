"""The environment for a driver subprocess that tests start (and may SIGKILL)."""

from __future__ import annotations

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def driver_env() -> dict:
    """This process's environment for a fresh driver: its own local Ray with 4 logical
    CPUs (no RAY_ADDRESS), and the repository importable."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env["TRAINYARD_RAY_NUM_CPUS"] = "4"
    env["PYTHONPATH"] = os.pathsep.join(p for p in [REPO, env.get("PYTHONPATH")] if p)
    return env


def thread_dump(pid: int) -> str:
    """Every thread's stack (Python and native frames) of live process ``pid``, from
    py-spy (installed with Ray's dashboard packages): what a test prints when it gives up
    waiting on a driver it started, so that a hang seen once can be read afterwards.
    Says why when there is none (py-spy missing, the process gone, no ptrace)."""
    import subprocess
    import sys

    py_spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    try:
        out = subprocess.run([py_spy, "dump", "--native", "--pid", str(pid)],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(no thread dump of {pid}: {exc})"
    return (out.stdout + out.stderr).strip() or f"(py-spy printed nothing for {pid})"
