"""Runs a user's script (``examples/``, ``tests/compat/``) inside the test process, as
``python SCRIPT`` from the repository's root would run it: as ``__main__``, with its
own ``sys.argv``, its directory first on ``sys.path``, the environment given and the
repository as working directory, all put back afterwards.

Why not a subprocess: a script's own process costs its interpreter, its framework's
import and its job's worker processes (about 10 CPU-s for a small Torch script) before
any of its work, and the suite runs forty of them. In the test process a script joins
the session's Ray, and inside the module's ``engine.reuse_workers()`` block
(``pooled_workers``) its fits start on warm workers. What a script checks (its own
asserts, what it prints) is the same; what a fresh interpreter adds (nothing imported
yet, a driver joining through ``RAY_ADDRESS``) stays covered by the scripts that the
test modules still run in their own process, and by ``make run``.

A script's functions pickle by value (cloudpickle does so for ``__main__``), as they do
when it is run as a file.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]

# Variables set once per process by an import and not again by a second one: Ray's own,
# the OpenMP ones importing torch sets, CRC32C_SW_MODE (tensorboardX), MLflow's telemetry
# marker, PYTORCH_NVML_BASED_CUDA_CHECK (DeepSpeed, the GPU tests). A script's run leaves
# them as it set them, and tests/conftest.py's no_env_leak does not count them as leaks.
PROCESS_ONCE_ENV = ("RAY_", "__RAY", "KMP_", "CRC32C_SW_MODE", "_MLFLOW_TELEMETRY",
                    "PYTORCH_NVML_BASED_CUDA_CHECK")


class ScriptFailed(AssertionError):
    pass


@contextlib.contextmanager
def _as_main(script: Path, env: Dict[str, str], argv: Sequence[str] = ()):
    saved_env = dict(os.environ)
    saved_argv, saved_path, saved_cwd = sys.argv[:], sys.path[:], os.getcwd()
    os.environ.update(env)
    sys.argv = [str(script), *argv]
    sys.path.insert(0, str(script.parent))
    os.chdir(REPO)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
        for key in set(os.environ) | set(saved_env):
            if key.startswith(PROCESS_ONCE_ENV) or os.environ.get(key) == saved_env.get(key):
                continue
            if key in saved_env:
                os.environ[key] = saved_env[key]
            else:
                os.environ.pop(key, None)


def run_in_process(script: Path, env: Optional[Dict[str, str]] = None,
                   argv: Sequence[str] = ()) -> Dict[str, object]:
    """Run ``script`` as ``__main__`` (with ``argv`` after its name); its globals when it
    ends. What it printed is under ``"__stdout__"``. A script that raises, or exits with
    a status other than 0, fails with what it printed."""
    out = io.StringIO()
    try:
        with _as_main(script, env or {}, argv), contextlib.redirect_stdout(out):
            try:
                namespace = runpy.run_path(str(script), run_name="__main__")
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    raise ScriptFailed(f"{script.name} exited with {exc.code!r}") from exc
                namespace = {}
    except BaseException:
        sys.stdout.write(out.getvalue())  # pytest shows it with the failure
        raise
    namespace = dict(namespace)
    namespace["__stdout__"] = out.getvalue()
    return namespace


def last_line(stdout: str) -> str:
    """The script's last printed line, skipping the lines Ray forwards from workers
    (``(TrainWorker pid=…) …``), which reach the same stdout in any order."""
    lines = [ln.strip() for ln in stdout.splitlines()
             if ln.strip() and not ln.lstrip().startswith("(")]
    return lines[-1] if lines else ""
