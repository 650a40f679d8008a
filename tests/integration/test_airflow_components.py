"""The DAGs under Airflow 3's real components (tests/support/airflow_harness.py): the scheduler with
the LocalExecutor, the dag-processor, the triggerer and the api-server, started once for
this module. Runs are triggered and read through the REST API v2; nothing here calls
``dag.test()`` or reads Airflow's tables.

The tests run in file order against one cluster (one metadata database, one storage root):
the promotion first (it sets ``production``), the rejection and the failure after it, and
the schedule last (it restarts the dag-processor with a new schedule).
"""

from __future__ import annotations

import pytest

pytest.importorskip("airflow.sdk", reason="Airflow 3 is needed: pip install 'trainyard[airflow]'")

from tests.support.airflow_harness import AirflowCluster  # noqa: E402
from tests.support.airflow_home import run_root  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

PIPELINE = "digits"
RETRAIN, BATCH = f"retrain_{PIPELINE}", f"batch_predict_{PIPELINE}"
#: For the scheduled run, which takes the DAG's default params: digits with one grid point
#: and two epochs (tests/support/airflow_pipelines.py), built by the same DAG files.
QUICK = "digits_quick"
#: A small run: one tuning trial of one epoch, two epochs of training, one worker.
SMALL = {"num_workers": 1, "tune_epochs": 1, "train_epochs": 2,
         "param_space": {"lr": {"grid_search": [0.005]}}}


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, request, head):
    """Airflow's four components on a migrated SQLite database, the DAGs of ``digits`` and
    ``digits_quick`` parsed, no schedule yet (``TRAINYARD_RETRAIN_SCHEDULE=none``); for
    ``execution="ray_job"``, the job server of ``head`` (token authentication on) in the
    connection ``trainyard_ray``, its token as the password."""
    scheme, rest = head.address.split("://", 1)
    cluster = AirflowCluster(str(tmp_path_factory.mktemp("airflow")), env={
        "TRAINYARD_PIPELINES": f"{QUICK}=tests.support.airflow_pipelines:QUICK",
        "TRAINYARD_AIRFLOW_PIPELINES": f"{PIPELINE},{QUICK}",
        "TRAINYARD_RETRAIN_SCHEDULE": "none",
        "AIRFLOW_CONN_TRAINYARD_RAY": f"{scheme}://:{head.token}@{rest}",
        "TRAINYARD_RAY_JOB_POLL_S": "0.5"}, shared_dir=run_root(tmp_path_factory))
    try:
        cluster.start()
        cluster.wait_dag(RETRAIN)
        cluster.wait_dag(BATCH)
        yield cluster
        if request.session.testsfailed:
            print(cluster.log_tails())  # shown with the failure's teardown output
    finally:
        cluster.stop()


def finished(airflow: AirflowCluster, dag_id: str, run_id: str, state: str) -> dict:
    run = airflow.wait_run(dag_id, run_id)
    assert run["state"] == state, airflow.describe(dag_id, run_id)
    return run


def asset_triggered_runs(airflow: AirflowCluster) -> list:
    return [r for r in airflow.runs(BATCH) if r["run_type"] == "asset_triggered"]


def test_a_promotion_starts_batch_predict_which_scores_with_the_promoted_model(airflow):
    run_id = airflow.trigger(RETRAIN, {**SMALL, "gate": {"accuracy": ">=0.5"}})
    finished(airflow, RETRAIN, run_id, "success")
    states = {t: ti["state"] for t, ti in airflow.task_instances(RETRAIN, run_id).items()}
    assert set(states.values()) == {"success"}, states
    promotion = airflow.xcom(RETRAIN, run_id, "promote")
    promoted = promotion["checkpoint"]["uri"]
    assert promotion["promoted"] and promoted.startswith(airflow.storage)

    # No trigger: the scheduler starts batch_predict on the promotion's asset event.
    batch = airflow.wait_for(lambda: asset_triggered_runs(airflow), 300,
                             f"an asset-triggered {BATCH} run")
    assert len(batch) == 1
    batch_id = batch[0]["dag_run_id"]
    finished(airflow, BATCH, batch_id, "success")
    events = airflow.api("GET", f"/dags/{BATCH}/dagRuns/{batch_id}/upstreamAssetEvents")
    [event] = events["asset_events"]
    assert (event["source_dag_id"], event["source_task_id"], event["source_run_id"]) == \
        (RETRAIN, "promote", run_id)
    assert event["extra"]["checkpoint_uri"] == promoted
    assert airflow.xcom(BATCH, batch_id, "resolve_model")["uri"] == promoted
    scored = airflow.xcom(BATCH, batch_id, "batch_predict")
    assert scored["metadata"]["checkpoint_uri"] == promoted

    import pyarrow.dataset as ds

    table = ds.dataset(scored["uri"], format="parquet").to_table()
    assert table.num_rows == 1797  # all of scikit-learn's digits
    assert {"predicted_label", "target"} <= set(table.column_names)
    assert airflow.webhook.received == []  # nothing failed, nothing was rejected


def test_a_failed_gate_skips_promote_starts_nothing_and_notifies_once(airflow):
    before = {r["dag_run_id"] for r in airflow.runs(BATCH)}
    run_id = airflow.trigger(RETRAIN, {**SMALL, "gate": {"accuracy": ">=1.01"}})
    finished(airflow, RETRAIN, run_id, "success")  # a rejection is not a failure
    tis = airflow.task_instances(RETRAIN, run_id)
    assert tis["promote"]["state"] == "skipped" and tis["train"]["state"] == "success"

    rejected = airflow.wait_for(lambda: airflow.webhook.events("rejected", RETRAIN, run_id),
                                120, "the rejection notification")
    assert len(airflow.webhook.events("rejected", run_id=run_id)) == 1
    [message] = rejected
    assert message["task_id"] == "promote" and message["pipeline"] == PIPELINE
    assert any("accuracy" in r and "1.01" in r and "FAIL" in r for r in message["reasons"])
    assert message["checkpoint_uri"] == airflow.xcom(RETRAIN, run_id, "train")["uri"]
    # Of this run (an earlier test's run that failed under load must not count here).
    assert airflow.webhook.events("failed", run_id=run_id) == []

    # No asset event, nothing queued for batch_predict: the scheduler has nothing to start.
    events = airflow.api("GET", "/assets/events", params={"source_run_id": run_id})
    assert events["total_entries"] == 0
    queued = airflow.api("GET", f"/dags/{BATCH}/assets/queuedEvents", ok=(200, 404))
    assert not queued or queued["total_entries"] == 0
    assert {r["dag_run_id"] for r in airflow.runs(BATCH)} == before


def test_a_task_that_fails_for_good_notifies_once(airflow, tmp_path):
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("storage cannot go under a file")
    run_id = airflow.trigger(RETRAIN, {**SMALL, "storage": str(not_a_dir / "storage")})
    finished(airflow, RETRAIN, run_id, "failed")
    tis = airflow.task_instances(RETRAIN, run_id)
    assert tis["ingest"]["state"] == "failed"
    assert tis["ingest"]["try_number"] == 3  # retried twice first
    assert tis["train"]["state"] == "upstream_failed"

    failed = airflow.wait_for(lambda: airflow.webhook.events("failed", RETRAIN, run_id),
                              120, "the failure notification")
    [message] = failed
    assert (message["task_id"], message["try_number"]) == ("ingest", 3)
    assert "Not a directory" in message["error"]
    # Not per retry, not per DAG run (a DAG-level message would carry the same run id).
    assert len(airflow.webhook.events("failed", run_id=run_id)) == 1
    assert "failed for good" in airflow.task_log(RETRAIN, run_id, "ingest")


# ray_job mode: the train step's job sleeps per epoch, so that it is seen deferred.
RAY_JOB = {**SMALL, "execution": "ray_job", "gate": {"accuracy": ">=1.01"}}


def _ti_state(airflow: AirflowCluster, dag_id: str, run_id: str, task_id: str) -> str:
    return (airflow.task_instances(dag_id, run_id).get(task_id) or {}).get("state") or ""


def _train_job(head, run_id: str):
    """The latest Ray job of the run's train step (its metadata names the orchestrator
    run; its submission id ends with the attempt, ``-a<n>``)."""
    jobs = [j for j in head.client().list_jobs()
            if (j.metadata or {}).get("trainyard_step") == "train"
            and run_id in (j.metadata or {}).get("trainyard_orchestrator_run", "")]
    return max(jobs, key=lambda j: int(j.submission_id.rsplit("-a", 1)[1]), default=None)


def test_a_deferred_ray_job_task_gives_its_pool_slot_back_and_resumes(airflow, head):
    """The default pool cut to one slot, the retrain DAG in ``ray_job`` mode: while its
    train task is deferred (its Ray job running), a task of another DAG run takes the
    slot and succeeds; then the train task resumes on the triggerer's event, and the
    model scores what the same DAG's local-mode run (the first test) scored."""
    airflow.api("PATCH", "/pools/default_pool", json={"slots": 1},
                params={"update_mask": ["slots"]})
    try:
        run_id = airflow.trigger(RETRAIN, {**RAY_JOB,
                                           "train_config": {"epoch_delay_s": 20.0}})
        airflow.wait_for(lambda: _ti_state(airflow, RETRAIN, run_id, "train") == "deferred",
                         600, "the train task deferred")
        other = airflow.trigger(BATCH)  # the first test promoted a model for it
        airflow.wait_for(lambda: _ti_state(airflow, BATCH, other, "resolve_model")
                         == "success", 300, "the other run's first task to succeed")
        # It ran in the one slot while the train task waited on its job: still deferred.
        assert _ti_state(airflow, RETRAIN, run_id, "train") == "deferred"
        assert str(_train_job(head, run_id).status) == "RUNNING"
        finished(airflow, BATCH, other, "success")  # it had the slot to itself
        finished(airflow, RETRAIN, run_id, "success")
    finally:
        airflow.api("PATCH", "/pools/default_pool", json={"slots": 128},
                    params={"update_mask": ["slots"]})
    assert str(_train_job(head, run_id).status) == "SUCCEEDED"
    assert airflow.task_instances(RETRAIN, run_id)["train"]["try_number"] == 1
    local = next(r["dag_run_id"] for r in airflow.runs(RETRAIN)
                 if r["state"] == "success" and r["conf"].get("gate") == {"accuracy": ">=0.5"})
    ours, theirs = (airflow.xcom(RETRAIN, r, "evaluate") for r in (run_id, local))
    assert (ours["accuracy"], ours["log_loss"]) == (theirs["accuracy"], theirs["log_loss"])


def test_clearing_or_marking_failed_a_deferred_ray_job_task_stops_its_job(airflow, head):
    """A user's cancel, both ways, through the REST API. Clearing the deferred train task
    stops its Ray job (``STOPPED`` within 30 s) and runs the task again, which submits
    the job's next attempt; marking that one failed stops it too and fails the run.
    Nothing is left running."""
    import time

    import psutil

    run_id = airflow.trigger(RETRAIN, {**RAY_JOB, "train_epochs": 20,
                                       "train_config": {"epoch_delay_s": 3.0}})

    def running_job(other_than=None):
        def found():
            job = _train_job(head, run_id)
            return job if job is not None and str(job.status) == "RUNNING" \
                and job.submission_id != other_than else None
        return airflow.wait_for(found, 300, "the train step's job running")

    def stopped_within_30_s(job, since, what):
        airflow.wait_for(lambda: str(head.client().get_job_status(job.submission_id))
                         == "STOPPED", 30, f"Ray job {job.submission_id} stopped")
        print(f"{what} to STOPPED: {time.monotonic() - since:.1f} s")

    def deferred():
        airflow.wait_for(lambda: _ti_state(airflow, RETRAIN, run_id, "train") == "deferred",
                         600, "the train task deferred")

    deferred()
    first = running_job()
    airflow.api("POST", f"/dags/{RETRAIN}/clearTaskInstances", json={
        "dag_run_id": run_id, "task_ids": ["train"], "dry_run": False,
        "only_failed": False, "reset_dag_runs": False})
    stopped_within_30_s(first, time.monotonic(), "cleared")
    second = running_job(other_than=first.submission_id)
    assert second.submission_id.endswith("-a2"), second.submission_id
    deferred()
    # The rerun the user asked for is one try, not a failure and a retry.
    assert airflow.task_instances(RETRAIN, run_id)["train"]["try_number"] == 2
    airflow.api("PATCH", f"/dags/{RETRAIN}/dagRuns/{run_id}/taskInstances/train",
                json={"new_state": "failed"})
    stopped_within_30_s(second, time.monotonic(), "marked failed")
    run = airflow.wait_run(RETRAIN, run_id)
    assert run["state"] == "failed", airflow.describe(RETRAIN, run_id)
    for job in (first, second):  # the steps' processes on the cluster have exited too
        driver = head.client().get_job_info(job.submission_id).driver_info
        if driver is not None:
            airflow.wait_for(lambda: not psutil.pid_exists(int(driver.pid))
                             or psutil.Process(int(driver.pid)).status() == "zombie",
                             30, "the job's driver to exit")


def test_the_retrain_schedule_creates_a_run_that_succeeds(airflow):
    quick = f"retrain_{QUICK}"
    # Only the quick pipeline's retraining is to run (and nothing after it).
    for dag_id in (RETRAIN, f"batch_predict_{QUICK}"):
        airflow.api("PATCH", f"/dags/{dag_id}", json={"is_paused": True})
    assert airflow.runs(quick) == []
    # As a deployment changes it: the dag-processor restarted with the new setting.
    airflow.start_component("dag-processor", TRAINYARD_RETRAIN_SCHEDULE="* * * * *")
    airflow.wait_dag(quick, condition=lambda d: d.get("timetable_summary") == "* * * * *")

    def scheduled() -> list:
        return [r for r in airflow.runs(quick) if r["run_type"] == "scheduled"]

    run = airflow.wait_for(scheduled, 180, f"a scheduled {quick} run")[0]
    finished(airflow, quick, run["dag_run_id"], "success")
    airflow.api("PATCH", f"/dags/{quick}", json={"is_paused": True})  # one is enough
    trained = airflow.xcom(quick, run["dag_run_id"], "train")
    assert trained["config"]["epochs"] == 2  # the pipeline's defaults: no conf was passed
    assert airflow.xcom(quick, run["dag_run_id"], "promote")["promoted"]
    assert not [r for r in airflow.runs(RETRAIN) if r["run_type"] == "scheduled"]  # paused
