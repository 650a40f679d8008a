"""Airflow in ``ray_job`` mode on a real Airflow 3 (``dag.test()``, SQLite) and a real Ray
cluster (``ray start --head``): the retrain DAG's steps run as Ray jobs, the tasks defer
while their jobs run, the orchestrator's process never imports torch nor starts Ray, and
a mapped ``train_task`` trains one run per map index."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.airflow_ray_job_driver import write_mapped_dag
from tasks.ray_jobs import job_name
from tests.conftest import REPO
from tests.support.airflow_home import airflow_env
from tests.support.ray_job_cluster import HEAD_MODULE_TIMEOUT_S

DRIVER = os.path.join(REPO, "tests", "support", "airflow_ray_job_driver.py")

# The module's first test also waits for the cluster fixture (ray_job_cluster).
pytestmark = pytest.mark.timeout(HEAD_MODULE_TIMEOUT_S)


@pytest.fixture(scope="module")
def ray_job_dag_runs(airflow_home, head, tmp_path_factory):
    storage = str(tmp_path_factory.mktemp("airflow_ray_job_storage"))
    out_dir = tmp_path_factory.mktemp("airflow_ray_job_out")
    out, log = str(out_dir / "out.json"), str(out_dir / "driver.log")
    mapped_folder = str(out_dir / "mapped_dags")
    write_mapped_dag(mapped_folder)
    env = airflow_env(airflow_home)
    bundles = json.loads(env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"])
    bundles.append({"name": "mapped", "kwargs": {"path": mapped_folder},
                    "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle"})
    env.update(AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST=json.dumps(bundles),
               MAPPED_TRAIN_STORAGE=storage)
    # The job server has token authentication on (Ray's default): its token is the
    # Airflow connection's password, the tasks' only way to it (no RAY_AUTH_TOKEN, and
    # no ~/.ray/auth_token: a HOME of its own).
    scheme, rest = head.address.split("://", 1)
    env.update(AIRFLOW_CONN_TRAINYARD_RAY=f"{scheme}://:{head.token}@{rest}",
               TY_TEST_RAY_TOKEN=head.token, HOME=str(out_dir / "home"),
               TRAINYARD_RAY_JOB_POLL_S="0.5", TRAINYARD_RUN_LEASE_S="15")
    for key in ("TRAINYARD_RAY_JOB_ADDRESS", "TRAINYARD_EXECUTION", "RAY_ADDRESS",
                "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(key, None)
    with open(log, "wb") as fh:
        proc = subprocess.run([sys.executable, DRIVER, out, storage, head.address,
                               mapped_folder],
                              env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT,
                              timeout=1500)
    text = open(log, errors="replace").read()
    if proc.returncode != 0 or not os.path.exists(out):
        pytest.fail(f"Airflow driver exited {proc.returncode}:\n{text[-6000:]}")
    with open(out) as fh:
        runs = json.load(fh)
    # The token went from the connection to the job server only: not into a log, an
    # XCom, a trigger's stored arguments or a task's state.
    assert head.token not in text and head.token not in json.dumps(runs)
    return runs, storage, text


def test_retrain_dag_runs_its_steps_as_deferred_ray_jobs(ray_job_dag_runs):
    runs, storage, log = ray_job_dag_runs
    retrain = runs["retrain"]
    assert retrain["state"] == "success", retrain["tis"]
    assert {t: ti["state"] for t, ti in retrain["tis"].items()} == {
        t: "success" for t in retrain["tis"]}
    # The orchestrator's process only submitted and waited.
    assert runs["torch_imported"] is False and runs["ray_initialized"] is False
    ckpt = retrain["xcom"]["train"]
    assert ckpt["run_name"].startswith("retrain_digits-train-")
    assert ckpt["uri"].startswith(os.path.join(storage, "runs"))
    assert retrain["xcom"]["promote"]["promoted"] is True
    assert retrain["xcom"]["evaluate"]["checkpoint_uri"] == ckpt["uri"]
    assert retrain["xcom"]["evaluate"]["accuracy"] > 0.5  # and local mode's: below
    # Each Ray step deferred while its job was running, then resumed and succeeded.
    deferred = {r["task_id"]: r for r in runs["transitions"]
                if r["state"] == "deferred" and r["map_index"] < 0}
    assert set(deferred) == {"tune", "train", "evaluate"}, runs["transitions"]
    train_job = job_name("train", ckpt["run_name"]) + "-a1"
    assert deferred["train"]["jobs"][train_job] in ("PENDING", "RUNNING")  # not ended
    resumed = [r for r in runs["transitions"] if r["task_id"] == "train"
               and r["map_index"] < 0 and r["state"] == "success"]
    job = runs["jobs"][train_job]
    assert job["status"] == "SUCCEEDED"
    assert deferred["train"]["at"] < job["end_time"] / 1000 <= resumed[0]["at"]
    assert "Deferring while Ray job" in log and f"[ray job {train_job}]" in log


def test_ray_job_mode_trains_the_model_local_mode_trains(ray_job_dag_runs, ray_session,
                                                         tmp_path):
    """The train step the DAG ran as a Ray job, run again in ``local`` mode (this process
    the driver) on the same data and config: the same model, the same accuracy."""
    import tasks

    runs, _storage, _ = ray_job_dag_runs
    xcom = runs["retrain"]["xcom"]
    remote = xcom["train"]
    splits = {k: xcom["split"][k] for k in ("train", "validation")}
    local = tasks.train("digits", splits, {"num_workers": 1},
                        {"storage": str(tmp_path), "config": remote["config"],
                         "execution": "local", "verbose": 0})
    assert local.uri != remote["uri"] and local.config == remote["config"]
    assert local.metrics["weights_checksum"] == remote["metrics"]["weights_checksum"]
    metrics = tasks.evaluate(local, splits["validation"], execution="local")
    assert metrics["accuracy"] == xcom["evaluate"]["accuracy"]
    assert metrics["log_loss"] == xcom["evaluate"]["log_loss"]


def test_mapped_train_tasks_train_one_run_per_map_index(ray_job_dag_runs):
    runs, _, _ = ray_job_dag_runs
    mapped = runs["mapped"]
    assert mapped["state"] == "success", mapped["tis"]
    first, second = mapped["xcom"]["train[0]"], mapped["xcom"]["train[1]"]
    assert first["run_name"].startswith("mapped_train-train-0-")
    assert second["run_name"].startswith("mapped_train-train-1-")
    assert (first["config"]["lr"], second["config"]["lr"]) == (1e-3, 2e-2)
    assert first["uri"] != second["uri"]
    assert first["metrics"]["weights_checksum"] != second["metrics"]["weights_checksum"]
    assert {r["map_index"] for r in runs["transitions"]
            if r["task_id"] == "train" and r["state"] == "deferred"} >= {0, 1}
