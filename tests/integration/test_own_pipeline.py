"""A team's own models through every door, without a change to trainyard:
``examples/own_pipeline`` (its own distribution, an XGBoost and a torch model on a CSV it
ships) is pip-installed into the project's venv, then

- ``trainyard pipelines`` lists both, from that distribution and version;
- ``trainyard run <name>`` trains each;
- ``python -m flows.retrain --pipeline churn_torch`` runs ingest → … → promote → batch
  predict;
- the shipped dags/, their DAG list taken from discovery, build ``retrain_churn_xgboost``,
  and its ``dag.test()`` runs green;
- after ``pip uninstall`` the listing no longer shows them.

Each door runs in its own process, as it would for a user (``python -m tasks.cli`` stands
for the ``trainyard`` script: this checkout first on the path). The package is installed
for this module only: the fixture uninstalls it, also when a test fails. This file is
also the Airflow driver script (``python test_own_pipeline.py airflow <out> <storage>``),
so that the test process never imports Airflow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "own_pipeline")
DAGS = os.path.join(REPO, "dags")
DIST, VERSION = "own-pipeline-example", "0.3.1"
XGB, TORCH = "churn_xgboost", "churn_torch"
HEAVY = ("torch", "tensorflow", "ray", "xgboost", "lightgbm", "transformers")

# It pip-installs into the shared venv, which every xdist worker imports from: under
# `make test` (--dist loadfile) this module runs on one worker, and it must stay the only
# module that installs into the venv, so that no two installs ever run at once
# (tests/README.md).
pytestmark = [pytest.mark.slow]


def pip(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check",
                           "-q"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def user_env(work: str) -> dict:
    """A user's shell: this checkout's trainyard, a local Ray, no pipeline settings."""
    env = {k: v for k, v in os.environ.items() if k not in (
        "RAY_ADDRESS", "TRAINYARD_PIPELINES", "TRAINYARD_AIRFLOW_PIPELINES",
        "PREFECT_API_URL", "PYTEST_ADDOPTS")}
    env.update({"PYTHONPATH": REPO, "TRAINYARD_RAY_NUM_CPUS": "6", "RAY_DEDUP_LOGS": "1",
                "PREFECT_HOME": os.path.join(work, "prefect_home")})
    return env


def run(work: str, *argv: str, timeout: float = 300, expect: int = 0,
        stderr: bool = False) -> str:
    """``python <argv>`` in the directory ``work`` (not the package's source: what runs
    must come from the installed distribution); its stdout (and stderr if asked)."""
    proc = subprocess.run([sys.executable, *argv], cwd=work, env=user_env(work),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == expect, (f"{argv} exited {proc.returncode}\n"
                                       f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc.stdout + proc.stderr if stderr else proc.stdout


def last_json_object(text: str) -> dict:
    """The JSON document ``--json`` printed (Ray may log lines around it)."""
    lines = text.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return json.loads("\n".join(lines[start:end + 1]))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("own_work"))


@pytest.fixture(scope="module")
def own_package(tmp_path_factory):
    """examples/own_pipeline installed (not editable) into this venv for this module."""
    src = str(tmp_path_factory.mktemp("own_src") / "own_pipeline")
    # A copy: building writes build/ and *.egg-info next to the sources.
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__"))
    pip("uninstall", "-y", DIST)  # left behind by a run that was killed
    pip("install", "--no-deps", "--no-build-isolation", src)
    try:
        yield src
    finally:
        pip("uninstall", "-y", DIST)


def test_trainyard_pipelines_lists_the_installed_models(own_package, work):
    rows = {r["name"]: r for r in json.loads(run(work, "-m", "tasks.cli", "pipelines",
                                                 "--json"))}
    for name, framework in ((XGB, "xgboost"), (TORCH, "torch")):
        row = rows[name]
        assert row["error"] is None, row["error"]
        assert (row["distribution"], row["version"], row["framework"]) == \
            (DIST, VERSION, framework)
        assert row["target"] == f"own_pipeline.churn:{name.split('_')[1].upper()}"
        # Its default source is the CSV the installed distribution ships.
        assert "site-packages" in row["source"] and os.path.isfile(row["source"])
    assert rows["digits"]["error"] is None and rows["digits"]["distribution"] == "trainyard"
    table = run(work, "-m", "tasks.cli", "pipelines")
    line = next(line for line in table.splitlines() if line.startswith(XGB))
    assert f"{DIST} {VERSION}" in line and "Customer churn: XGBoost" in line


@pytest.mark.parametrize("name,key,epochs", [(XGB, "num_boost_round", 10),
                                             (TORCH, "epochs", 4)])
def test_trainyard_run_trains_it(own_package, work, name, key, epochs):
    storage = os.path.join(work, f"cli_{name}")
    out = last_json_object(run(work, "-m", "tasks.cli", "run", name, "--epochs", str(epochs),
                               "--storage", storage, "--json", timeout=400))
    assert out["run"].startswith(f"{name}-") and out["config"][key] == epochs
    assert out["checkpoint"].startswith(os.path.join(storage, "runs", out["run"]))
    card = json.load(open(os.path.join(out["checkpoint"], "model_card.json")))
    assert card["metadata"]["pipeline"] == name and card["label_column"] == "churned"
    assert out["validation"]["num_rows"] == 80 and out["validation"]["accuracy"] >= 0.6


def test_the_prefect_flow_retrains_promotes_and_scores(own_package, work):
    storage = os.path.join(work, "flow")
    out = run(work, "-m", "flows.retrain", "--pipeline", TORCH, "--storage", storage,
              "--workers", "1", "--tune-epochs", "2", "--epochs", "6", timeout=560,
              stderr=True)  # the summary is a Prefect log line
    assert f"== retrain {TORCH}: PROMOTED" in out, out[-3000:]
    pointer = json.load(open(os.path.join(storage, "models", TORCH, "production.json")))
    assert pointer["checkpoint"]["pipeline"] == TORCH
    assert pointer["checkpoint"]["config"]["epochs"] == 6  # trained after tuning
    predictions = os.path.join(storage, "predictions")
    assert any(files for _, _, files in os.walk(predictions)), "no batch predictions"
    reports = os.listdir(os.path.join(storage, "reports"))
    assert len(reports) == 1 and reports[0].startswith(f"{TORCH}-")


def test_the_shipped_retrain_dag_runs_green(own_package, work, tmp_path, tmp_path_factory):
    from tests.support.airflow_home import airflow_env, migrated_home, run_root

    home = migrated_home(str(tmp_path / "airflow_home"), run_root(tmp_path_factory))
    env = {**airflow_env(home), **{k: v for k, v in user_env(work).items()
                                   if k.startswith(("TRAINYARD", "RAY"))}}
    env.pop("TRAINYARD_AIRFLOW_PIPELINES", None)  # the DAG list comes from discovery
    storage, out = str(tmp_path / "storage"), str(tmp_path / "airflow.json")
    with open(tmp_path / "airflow.log", "wb") as log:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "airflow", out,
                               storage], env=env, cwd=work, stdout=log,
                              stderr=subprocess.STDOUT, timeout=560)
    tail = open(tmp_path / "airflow.log", errors="replace").read()[-5000:]
    assert proc.returncode == 0 and os.path.exists(out), tail
    result = json.load(open(out))
    assert result["import_errors"] == {}
    for name in ("digits", "breast_cancer", XGB, TORCH):
        assert {f"retrain_{name}", f"batch_predict_{name}"} <= set(result["dags"])
    assert result["heavy_modules"] == [], "parsing dags/ imported a framework"
    assert result["state"] == "success", (result, tail)
    assert set(result["tis"].values()) == {"success"}, result["tis"]
    pointer = json.load(open(os.path.join(storage, "models", XGB, "production.json")))
    assert pointer["checkpoint"]["pipeline"] == XGB


def test_after_uninstalling_the_listing_no_longer_shows_it(own_package, work):
    pip("uninstall", "-y", DIST)
    names = {r["name"] for r in json.loads(run(work, "-m", "tasks.cli", "pipelines",
                                               "--json"))}
    assert XGB not in names and TORCH not in names and "digits" in names
    err = run(work, "-m", "tasks.cli", "run", XGB, expect=2, stderr=True)
    assert f"Unknown pipeline {XGB!r}" in err


# --- the Airflow driver (runs in a subprocess with its own AIRFLOW_HOME) -------------------
def _airflow(out: str, storage: str) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.session import create_session

    bag = DagBag(dag_folder=DAGS)
    heavy = sorted(m for m in HEAVY if m in sys.modules)
    result = {"dags": sorted(bag.dags), "heavy_modules": heavy,
              "import_errors": {os.path.basename(k): v for k, v in bag.import_errors.items()}}
    dr = bag.dags[f"retrain_{XGB}"].test(run_conf={
        "storage": storage, "num_workers": 1, "tune_epochs": 3, "train_epochs": 10,
        "param_space": {"max_depth": {"grid_search": [2, 3]}}})
    with create_session() as session:
        result["tis"] = {ti.task_id: str(getattr(ti.state, "value", ti.state))
                         for ti in dr.get_task_instances(session=session)}
    result["state"] = str(getattr(dr.state, "value", dr.state))
    with open(out, "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    scenario, out_path, storage_path = sys.argv[1:]
    assert scenario == "airflow", scenario
    _airflow(out_path, storage_path)
