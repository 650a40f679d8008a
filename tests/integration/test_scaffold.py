"""``trainyard new-pipeline``: the package it writes is installable as written and
passes its own generated test unchanged, for every framework choice."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import tomllib

import pytest

from pipelines.scaffold import FRAMEWORKS
from tasks.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def scaffold(tmp_path, framework: str, name: str = None) -> str:
    name = name or f"team_{framework}"
    project = str(tmp_path / f"{name}-project")
    proc = subprocess.run([sys.executable, "-m", "tasks.cli", "new-pipeline", name,
                           "--framework", framework, "--dir", project], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 0, proc.stderr
    assert f"Wrote the {name} pipeline ({framework}) to {project}" in proc.stdout
    return project


def test_the_package_declares_its_entry_point_and_ships_its_sample(tmp_path):
    project = scaffold(tmp_path, "xgboost", "churn")
    with open(os.path.join(project, "pyproject.toml"), "rb") as fh:
        meta = tomllib.load(fh)
    assert meta["project"]["name"] == "churn-pipeline"
    assert meta["project"]["entry-points"]["trainyard.pipelines"] == {
        "churn": "churn_pipeline.pipeline:SPEC"}
    assert meta["tool"]["setuptools"]["package-data"] == {"churn_pipeline": ["data/*.csv"]}
    sample = os.path.join(project, "churn_pipeline", "data", "sample.csv")
    with open(sample) as fh:
        table = list(csv.DictReader(fh))
    assert len(table) >= 100 and {r["label"] for r in table} == {"0", "1"}
    readme = open(os.path.join(project, "README.md")).read()
    for command in ("trainyard run churn", "python -m flows.retrain --pipeline churn",
                    "airflow dags test retrain_churn", "pip install -e ."):
        assert command in readme
    # Its spec's default source is the sample it ships (an absolute path).
    proc = subprocess.run([sys.executable, "-c", "from churn_pipeline.pipeline import SPEC; "
                           "print(SPEC.name, SPEC.source)"], cwd=project, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.stdout.split() == ["churn", os.path.realpath(sample)], proc.stderr


def test_bad_scaffold_arguments_exit_2_with_the_fix(tmp_path, capsys):
    assert main(["new-pipeline", "Churn-Model", "--framework", "torch",
                 "--dir", str(tmp_path / "a")]) == 2
    assert "lower-case letters, digits and '_'" in capsys.readouterr().err
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("mine")
    assert main(["new-pipeline", "churn", "--framework", "torch",
                 "--dir", str(tmp_path / "b")]) == 2
    assert "choose another --dir" in capsys.readouterr().err
    assert (tmp_path / "b" / "keep.txt").read_text() == "mine"  # nothing overwritten
    with pytest.raises(SystemExit):
        main(["new-pipeline", "churn", "--framework", "keras"])
    assert "invalid choice: 'keras'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_scaffold_passes_its_own_generated_test_unchanged(tmp_path, framework):
    project = scaffold(tmp_path, framework)
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "TRAINYARD_PIPELINES", "PYTEST_ADDOPTS")}
    env.update({"PYTHONPATH": REPO, "TRAINYARD_RAY_NUM_CPUS": "4"})
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-W", "ignore::DeprecationWarning"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=360)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout
