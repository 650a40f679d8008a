"""The Airflow side of tests/integration/test_airflow_ray_job.py (run as a script, in its
own AIRFLOW_HOME): ``dag.test()`` of ``retrain_digits`` with ``execution="ray_job"``,
then a DAG whose ``train_task`` is mapped over two learning rates, also as Ray jobs.

    python tests/support/airflow_ray_job_driver.py <out.json> <storage> <job server address> \\
        <folder of the mapped DAG's bundle>

Every task-instance state change is recorded (``TaskInstance.set_state``), with the Ray
job statuses of the DAG run at the moment a task defers, so the test can see that the
task was deferred while its job ran.
"""

from __future__ import annotations

import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS = os.path.join(REPO, "dags")
TRANSITIONS: list = []


# The test's own view of the cluster (what it lists of its jobs): the token it was
# given apart from the Airflow connection, which is the tasks' only way to it.
_TEST_HEADERS = ({"Authorization": f"Bearer {os.environ.pop('TY_TEST_RAY_TOKEN')}"}
                 if os.environ.get("TY_TEST_RAY_TOKEN") else None)


def _record_transitions(address: str) -> None:
    from airflow.models.taskinstance import TaskInstance
    from ray.job_submission import JobSubmissionClient

    original = TaskInstance.set_state

    def set_state(self, state, *args, **kwargs):
        name = str(getattr(state, "value", state))
        row = {"task_id": self.task_id, "map_index": self.map_index, "state": name,
               "at": time.time()}
        if name == "deferred":
            row["jobs"] = {j.submission_id: str(j.status)
                           for j in JobSubmissionClient(address, headers=_TEST_HEADERS).list_jobs()
                           if (j.submission_id or "").startswith("trainyard-")}
        TRANSITIONS.append(row)
        return original(self, state, *args, **kwargs)

    TaskInstance.set_state = set_state


def _xcom(dr, dag_id: str) -> dict:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    out: dict = {}
    with create_session() as session:
        for row in session.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids=dag_id,
                                                      key="return_value")):
            key = row.task_id if row.map_index < 0 else f"{row.task_id}[{row.map_index}]"
            out[key] = XComModel.deserialize_value(row)
    return out


def _tis(dr) -> dict:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {(ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"):
                {"state": str(getattr(ti.state, "value", ti.state)),
                 "try_number": ti.try_number}
                for ti in dr.get_task_instances(session=session)}


MAPPED_DAG = """
import os
from datetime import datetime, timezone

from airflow.sdk import dag

from tasks.airflow import ingest_task, split_task, train_task

STORAGE = os.environ["MAPPED_TRAIN_STORAGE"]


@dag(dag_id="mapped_train", schedule=None, catchup=False,
     start_date=datetime(2026, 1, 1, tzinfo=timezone.utc))
def mapped_train():
    data = ingest_task("sklearn:digits", storage=STORAGE)
    splits = split_task(data, 0.2, 0, "target")
    train_task.partial(pipeline="digits", datasets=splits,
                       scaling={"num_workers": 1}).expand(run=[
        {"storage": STORAGE, "execution": "ray_job",
         "config": {"lr": lr, "epochs": 2, "seed": 0}} for lr in (1e-3, 2e-2)])


mapped_train()
"""


def write_mapped_dag(folder: str) -> None:
    """A DAG whose train task is mapped over two learning rates, in its own DAG bundle
    (``dag.test()`` runs DAGs that a bundle holds)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "mapped_train.py"), "w") as f:
        f.write(MAPPED_DAG)


def main(out: str, storage: str, address: str, mapped_folder: str) -> None:
    from airflow.dag_processing.dagbag import DagBag

    _record_transitions(address)
    bag = DagBag(dag_folder=DAGS)
    assert not bag.import_errors, bag.import_errors
    retrain = bag.dags["retrain_digits"]
    dr = retrain.test(run_conf={
        "storage": storage, "execution": "ray_job", "num_workers": 1, "tune_epochs": 1,
        "param_space": {"lr": {"grid_search": [3e-3, 1e-2]}}, "train_epochs": 3,
        "train_config": {"epoch_delay_s": 0.5}, "gate": {"accuracy": ">=0.5"}})
    result = {"retrain": {"state": str(getattr(dr.state, "value", dr.state)),
                          "tis": _tis(dr), "xcom": _xcom(dr, "retrain_digits")}}
    os.environ["MAPPED_TRAIN_STORAGE"] = storage
    mapped = DagBag(dag_folder=mapped_folder).dags["mapped_train"]
    dr = mapped.test()
    result["mapped"] = {"state": str(getattr(dr.state, "value", dr.state)),
                        "tis": _tis(dr), "xcom": _xcom(dr, "mapped_train")}
    import ray

    from ray.job_submission import JobSubmissionClient

    jobs = {j.submission_id: {"status": str(j.status), "start_time": j.start_time,
                              "end_time": j.end_time}
            for j in JobSubmissionClient(address, headers=_TEST_HEADERS).list_jobs()
            if (j.submission_id or "").startswith("trainyard-")}
    result.update(transitions=TRANSITIONS, jobs=jobs, torch_imported="torch" in sys.modules,
                  ray_initialized=ray.is_initialized())
    with open(out + ".tmp", "w") as f:
        json.dump(result, f, default=str)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main(*sys.argv[1:])
