"""The module paths the docs showed before ``tasks`` became a package of packages still
work: each gives the new module itself (the same objects) and a DeprecationWarning that
names the new import; ``import tasks`` stays light; the steps have the same names in
``tasks``, ``tasks.prefect`` and ``tasks.airflow``.

One child process (Airflow reads its configuration once per process, and the test
process never imports Airflow) imports every old path and reports what it got.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.support.subprocess_env import REPO, driver_env

CHILD = textwrap.dedent('''
    import importlib, json, sys, warnings
    import tasks
    heavy = [m for m in ("ray", "prefect", "airflow", "torch", "pyarrow") if m in sys.modules]
    from tasks._graveyard import MOVED
    out = {"heavy_after_import_tasks": heavy, "paths": {}}
    for old, new in MOVED.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        target = importlib.import_module(new)
        public = getattr(target, "__all__", [])
        out["paths"][old] = {
            "same_module": module is target and sys.modules[old] is target,
            "same_objects": bool(public) and all(
                getattr(module, n) is getattr(target, n) for n in public),
            "warnings": [str(w.message) for w in caught
                         if issubclass(w.category, DeprecationWarning)]}
    from tasks.validate import validate as old_validate
    from tasks.core import ingest as old_ingest
    out["step_names_stay_steps"] = (
        tasks.validate is old_validate and callable(tasks.validate)
        and tasks.ingest is old_ingest)
    steps = ("ingest", "validate", "split", "train", "tune", "evaluate", "batch_predict",
             "promote")
    import tasks.airflow, tasks.prefect
    out["missing_step_names"] = {
        pkg.__name__: [n for n in steps if not callable(getattr(pkg, n, None))]
        for pkg in (tasks, tasks.prefect, tasks.airflow)}
    print("RESULT " + json.dumps(out))
''')


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    pytest.importorskip("prefect")
    pytest.importorskip("airflow.sdk")
    env = {k: v for k, v in driver_env().items() if not k.startswith("AIRFLOW")}
    env["AIRFLOW_HOME"] = str(tmp_path_factory.mktemp("airflow_home"))
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


OLD_PATHS = {"tasks.core": "tasks.steps", "tasks.validate": "tasks.validation",
             "tasks.prefect_tasks": "tasks.prefect", "tasks.airflow_tasks": "tasks.airflow",
             "tasks.airflow_triggers": "tasks.airflow.triggers"}


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_an_old_path_gives_the_new_module_and_warns(report, old):
    got = report["paths"][old]
    assert got["same_module"] and got["same_objects"], got
    assert len(got["warnings"]) == 1 and OLD_PATHS[old] in got["warnings"][0], got


def test_tasks_and_each_orchestrator_package_have_the_same_step_names(report):
    assert report["missing_step_names"] == {"tasks": [], "tasks.prefect": [],
                                            "tasks.airflow": []}


def test_the_step_names_stay_the_steps_and_import_tasks_stays_light(report):
    assert report["step_names_stay_steps"]
    assert report["heavy_after_import_tasks"] == []
