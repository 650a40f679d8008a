"""An ``AIRFLOW_HOME`` for a test, with a migrated SQLite metadata database.

Airflow reads its configuration from the environment once per process and keeps global
state, so the tests run Airflow in subprocesses, each given :func:`airflow_env`: its own
home and SQLite database, ``dags/`` as the DAG bundle ``deploy/airflow/airflow.env``
configures, no example DAGs, 1 s between task retries, a local Ray.

``airflow db migrate`` on an empty database is the same work every time, so a run does
it once: the first test that asks migrates a template under a file lock that every
xdist worker of the run shares, and each home gets a copy of the migrated file
(:func:`migrated_home`). The ``airflow_home`` fixture is registered for every module by
tests/conftest.py (``pytest_plugins``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS = os.path.join(REPO, "dags")
PIPELINE = "digits"
DB_NAME = "airflow.db"


def deployed_bundles() -> str:
    """The DAG bundle list of deploy/airflow/airflow.env, pointed at this checkout's dags/."""
    key = "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST="
    with open(os.path.join(REPO, "deploy", "airflow", "airflow.env")) as fh:
        line = next(line for line in fh if line.startswith(key))
    bundles = json.loads(line[len(key):])
    for bundle in bundles:
        bundle["kwargs"]["path"] = DAGS
    return json.dumps(bundles)


def airflow_env(home: str) -> dict:
    """The environment of an Airflow subprocess whose home is ``home``."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env.pop("AIRFLOW__CORE__DAGS_FOLDER", None)
    env.update({
        "AIRFLOW_HOME": home,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{os.path.join(home, DB_NAME)}",
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": deployed_bundles(),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
        "TRAINYARD_AIRFLOW_PIPELINES": PIPELINE,
        "TRAINYARD_RAY_NUM_CPUS": "4",
        "RAY_DEDUP_LOGS": "1",
        "PYTHONPATH": os.pathsep.join(p for p in [REPO, os.environ.get("PYTHONPATH")] if p),
    })
    return env


def _migrated_template(shared_dir: str) -> str:
    """The path of a database ``airflow db migrate`` made, migrating it if no process of
    this run has: ``shared_dir`` is the run's temporary root, the same for every xdist
    worker."""
    from filelock import FileLock

    home = os.path.join(shared_dir, "airflow_db_template")
    db, done = os.path.join(home, DB_NAME), os.path.join(home, "migrated")
    os.makedirs(home, exist_ok=True)
    with FileLock(os.path.join(shared_dir, "airflow_db_template.lock")):
        if not os.path.exists(done):
            if os.path.exists(db):
                os.remove(db)  # a migration that did not finish
            proc = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"],
                                  env=airflow_env(home), cwd=REPO, capture_output=True,
                                  text=True, timeout=300)
            if proc.returncode != 0:
                raise RuntimeError("airflow db migrate failed:\n" + proc.stdout[-3000:]
                                   + proc.stderr[-3000:])
            open(done, "w").close()
    return db


def migrated_home(home: str, shared_dir: str, db_name: str = DB_NAME) -> str:
    """Make ``home`` an AIRFLOW_HOME whose database (``db_name`` in it, as the processes'
    ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` names it) is migrated; returns ``home``."""
    os.makedirs(home, exist_ok=True)
    shutil.copyfile(_migrated_template(shared_dir), os.path.join(home, db_name))
    return home


def run_root(tmp_path_factory) -> str:
    """The temporary root of the whole run: under xdist, the folder above each worker's
    own (``/tmp/pytest-of-<user>/pytest-<n>/``), else the session's own."""
    base = tmp_path_factory.getbasetemp()
    return str(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> str:
    """An AIRFLOW_HOME with a migrated SQLite metadata database, one per module."""
    pytest.importorskip("airflow.sdk", reason="Airflow 3 is needed: pip install "
                                              "'trainyard[airflow]'")
    home = migrated_home(str(tmp_path_factory.mktemp("airflow_home")),
                         run_root(tmp_path_factory))
    assert os.path.exists(os.path.join(home, DB_NAME))
    return home
