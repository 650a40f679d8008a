"""Ray's own Tune and Train examples and doc snippets (``ray-project/ray``), ported by
rewriting their imports and nothing else, each run as ``python SCRIPT <argv>`` would
run it: in this process, on the session's Ray and the module's warm workers
(tests/compat/_run.py says why).

Each script under ``tests/compat/ray_docs/`` keeps the original's path and starts with

    # Ported from ray-project/ray@<commit>:<path>
    # Changes: <what else changed, and why; "imports only" when nothing did>
    # argv: <the arguments it runs with, e.g. --smoke-test>

A script passes when it ends without an error, as the original does under Ray (their
own asserts are kept). Ray core stays Ray (``import ray``, ``ray.init``,
``ray.get``): here ``ray.init()`` finds the session's instance running and returns, as
``ray.init(ignore_reinit_error=True)`` would, and ``ray.shutdown()`` leaves it up for
the next script; a script run on its own starts and stops its own.
docs/porting-from-ray.md lists every script tried and its result.
"""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path
from typing import Iterator, List

import pytest

from tests.support.script_runner import run_in_process

pytestmark = pytest.mark.usefixtures("pooled_workers")

HERE = Path(__file__).resolve().parent / "ray_docs"
SCRIPTS = sorted(HERE.rglob("*.py"))
HEADER = ("# Ported from ray-project/ray@", "# Changes: ", "# argv:")


def header(script: Path) -> List[str]:
    return script.read_text().splitlines()[:3]


def argv_of(script: Path) -> List[str]:
    return shlex.split(header(script)[2][len("# argv:"):])


@contextlib.contextmanager
def _on_the_sessions_ray() -> Iterator[None]:
    import ray

    init, shutdown = ray.init, ray.shutdown

    def joined(*args, **kwargs):
        if ray.is_initialized():
            return None
        return init(*args, **kwargs)

    ray.init, ray.shutdown = joined, lambda *a, **k: None
    try:
        yield
    finally:
        ray.init, ray.shutdown = init, shutdown


def test_every_ported_script_says_where_it_comes_from() -> None:
    assert SCRIPTS
    for script in SCRIPTS:
        lines = header(script)
        assert len(lines) == 3 and all(line.startswith(h) for line, h in
                                       zip(lines, HEADER)), (script, lines)
        origin = lines[0][len(HEADER[0]):]
        commit, _, path = origin.partition(":")
        assert len(commit) == 40 and path == str(script.relative_to(HERE)), (script, origin)
        text = script.read_text()
        for old in ("ray.tune", "ray.train", "ray.air", "ray.data"):
            assert f"from {old}" not in text and f"import {old}" not in text, (script, old)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(HERE)))
def test_ray_docs_script_runs(script: Path, tmp_path: Path, ray_session,
                              pooled_workers) -> None:
    from engine import Result
    from engine.tune import ExperimentAnalysis, ResultGrid

    try:
        with _on_the_sessions_ray():
            namespace = run_in_process(script, {
                "TRAINYARD_STORAGE_PATH": str(tmp_path),
                "TRAINYARD_DISABLE_DEFAULT_LOGGERS": "0",
                "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "0"}, argv_of(script))
    finally:
        # A script's idle warm groups would hold CPUs the next script's Ray Data tasks
        # (which the pool does not evict for) need: each script starts with none left.
        pooled_workers.evict_all()
    # A trial that failed does not fail its Tuner's fit(), as in Ray: what the script
    # kept must hold no error, or it ran as it does in Ray only by the look of it.
    for name, value in namespace.items():
        grid = value.result_grid if isinstance(value, ExperimentAnalysis) else value
        if isinstance(grid, ResultGrid):
            assert not grid.errors, (name, grid.errors)
        elif isinstance(value, Result):
            assert value.error is None, (name, value.error)
