"""The engine on a multi-node Ray cluster: ``ray.cluster_utils.Cluster`` with a head and a
worker node (2 logical CPUs each), one training worker per node
(``placement_strategy="STRICT_SPREAD"``), storage on the local S3-compatible server.

Scenarios: TorchTrainer (DDP across the nodes), XGBoostTrainer (its collective and Ray
Data shards across the nodes), a Tuner with 2 trials, and a node removed mid-run,
recovered under ``FailureConfig`` on a node added in its place.

The cluster is started by a driver subprocess (this file, run as a script), so that the
test session's shared local Ray (``ray_session``) is left alone; all scenarios share one
cluster to pay its start-up once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:  # run as a script
    sys.path.insert(0, REPO)

FAIL_EPOCHS = 6
pytestmark = pytest.mark.slow  # one cluster for the module: ~1.5 min on 2 cores


# --- the test side ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster_runs(s3_server, tmp_path_factory):
    """Every scenario on one 2-node cluster, in a driver subprocess."""
    pytest.importorskip("torch")
    pytest.importorskip("xgboost")
    from tests.support.subprocess_env import driver_env

    out_dir = tmp_path_factory.mktemp("multinode")
    out, log = str(out_dir / "result.json"), str(out_dir / "driver.log")
    storage = s3_server.uri(f"multinode/{os.getpid()}-{int(time.time())}")
    # Its own Ray temp dir (short: Ray's socket paths): the Cluster writes the head's
    # address to <temp dir>/ray/ray_current_cluster, which a plain ray.init() elsewhere
    # (an example script on the other xdist worker) would otherwise join, then or later.
    env = driver_env()
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="tymn", dir="/tmp")
    try:
        with open(log, "wb") as fh:
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), storage, out,
                                   str(out_dir / "markers")], env=env, cwd=REPO,
                                  stdout=fh, stderr=subprocess.STDOUT, timeout=540)
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    if proc.returncode != 0 or not os.path.exists(out):
        tail = open(log, errors="replace").read()[-8000:]
        pytest.fail(f"multi-node driver exited {proc.returncode}; log {log}:\n{tail}")
    with open(out) as fh:
        return json.load(fh), s3_server


def _ranks(rows):
    """``{world_rank: (node_rank, local_rank, node_id)}`` of one round's rows."""
    return {r["world_rank"]: (r["node_rank"], r["local_rank"], r["node_id"]) for r in rows}


def test_torch_ddp_spreads_one_worker_per_node_with_node_and_local_ranks(cluster_runs):
    runs, s3 = cluster_runs
    torch_run = runs["torch"]
    ranks = _ranks(torch_run["last_round"])
    assert sorted(ranks) == [0, 1]
    assert {ranks[0][0], ranks[1][0]} == {0, 1}           # node_rank 0 and 1
    assert ranks[0][1] == ranks[1][1] == 0                # local_rank 0 on each node
    assert ranks[0][2] != ranks[1][2]                     # two different nodes
    assert {ranks[0][2], ranks[1][2]} == set(runs["nodes"]["initial"])
    # DDP spans both nodes: the all-reduced sum of (rank + 1) is 1 + 2 on every rank.
    assert all(r["allreduce"] == 3.0 for r in torch_run["last_round"])
    assert torch_run["metrics"]["epoch"] == 2
    # Checkpoints and the run record live on S3.
    assert torch_run["checkpoint_uri"].startswith("s3://")
    prefix = torch_run["checkpoint_uri"].split("/", 3)[3].split("?")[0]
    keys = s3.keys(prefix)
    assert any(k.endswith(".trainyard_committed") for k in keys), keys
    assert torch_run["checkpoint_epoch"] == 2


def test_xgboost_trains_one_model_across_two_nodes(cluster_runs):
    runs, _ = cluster_runs
    xgb = runs["xgboost"]
    nodes = {r["world_rank"]: (r["node_rank"], r["node_id"]) for r in xgb["last_round"]}
    assert {n[0] for n in nodes.values()} == {0, 1}
    assert nodes[0][1] != nodes[1][1]
    # Ray Data split the training rows between the nodes; XGBoost's collective made one
    # model: both ranks see the same loss over all rows.
    assert sum(r["rows"] for r in xgb["last_round"]) == xgb["train_rows"] - xgb["train_rows"] % 2
    assert len({r["loss"] for r in xgb["last_round"]}) == 1
    assert xgb["world_size"] == 2
    assert xgb["checkpoint_uri"].startswith("s3://") and xgb["num_boosted_rounds"] == 10
    assert xgb["accuracy"] > 0.9


def test_tuner_runs_two_multinode_trials(cluster_runs):
    runs, _ = cluster_runs
    tune = runs["tune"]
    assert tune["num_errors"] == 0 and len(tune["trials"]) == 2
    assert sorted(t["lr"] for t in tune["trials"]) == [0.05, 0.2]
    for trial in tune["trials"]:
        assert sorted(trial["node_ranks"]) == [0, 1] and trial["local_ranks"] == [0, 0]
        assert trial["checkpoint_uri"].startswith("s3://")
    assert tune["experiment_path"].startswith("s3://")
    assert tune["best_lr"] in (0.05, 0.2)


def test_a_removed_node_is_recovered_on_a_readded_node(cluster_runs):
    runs, _ = cluster_runs
    fail = runs["node_failure"]
    nodes = runs["nodes"]
    assert fail["error"] is None, fail["error"]
    assert nodes["removed"] in nodes["initial"] and nodes["added"] not in nodes["initial"]
    # One failure for the removed node. Under load, the restarted group may be placed on
    # that node before Ray has marked it dead, which costs one more restart (the run
    # allows max_failures=2); a third would fail the run and the assert above.
    assert 1 <= fail["num_failures"] <= 2
    # Training resumed from a checkpoint (not from scratch) and finished every epoch once.
    assert fail["metrics"]["epoch"] == FAIL_EPOCHS - 1
    assert 0 < fail["metrics"]["iterations_since_restore"] < FAIL_EPOCHS
    assert fail["epochs"] == list(range(FAIL_EPOCHS))
    # After the restart, the workers ran on the head and on the new node.
    after = {r["node_id"] for r in fail["last_round"]}
    assert after == {nodes["head"], nodes["added"]}
    assert sorted(r["node_rank"] for r in fail["last_round"]) == [0, 1]
    assert all(r["allreduce"] == 3.0 for r in fail["last_round"])


# --- the driver side (runs in the subprocess) -------------------------------------------
def _placement() -> dict:
    import ray

    import engine

    ctx = engine.get_context()
    return {"world_rank": ctx.get_world_rank(), "local_rank": ctx.get_local_rank(),
            "node_rank": ctx.get_node_rank(), "node_id": ray.get_runtime_context().get_node_id()}


def _ddp_loop(config):
    """Every epoch: an all-reduce across the nodes, a report with where this rank runs,
    a rank-0 checkpoint; resumes from the latest checkpoint."""
    import torch
    import torch.distributed as dist

    import engine

    start = 0
    ckpt = engine.get_checkpoint()
    if ckpt is not None:
        start = ckpt.to_dict()["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        placement = _placement()
        total = torch.tensor([float(placement["world_rank"] + 1)])
        dist.all_reduce(total)
        checkpoint = (engine.Checkpoint.from_dict({"epoch": epoch})
                      if placement["world_rank"] == 0 else None)
        engine.report({"epoch": epoch, "allreduce": total.item(), "lr": config.get("lr", 0.0),
                       "loss": 1.0 / (1 + epoch) / max(config.get("lr", 1.0), 1e-9),
                       **placement}, checkpoint=checkpoint)
        marker_dir = config.get("marker_dir")
        if marker_dir and placement["world_rank"] == 0:
            open(os.path.join(marker_dir, f"epoch_{epoch}"), "w").close()
        time.sleep(config.get("epoch_delay_s", 0.0))


def _xgb_loop(config):
    import xgboost
    from xgboost import collective

    from engine import get_checkpoint, get_dataset_shard
    from engine.xgboost import ReportCallback

    shard = get_dataset_shard("train").materialize().to_pandas()
    dtrain = xgboost.DMatrix(shard.drop(columns=["target"]), label=shard["target"])
    checkpoint = get_checkpoint()
    xgboost.train(config["params"], dtrain, num_boost_round=config["rounds"],
                  evals=[(dtrain, "train")],
                  xgb_model=ReportCallback.get_model(checkpoint) if checkpoint else None,
                  callbacks=[ReportCallback(metrics={"loss": "train-logloss"}, extra_metrics={
                      "world_size": collective.get_world_size(), "rows": int(dtrain.num_row()),
                      **_placement()})])


def _last_round(result) -> list:
    df = result.worker_metrics_dataframe
    last = df[df["training_iteration"] == df["training_iteration"].max()]
    return json.loads(last.to_json(orient="records"))


def _spread(n: int = 2):
    from engine import ScalingConfig

    return ScalingConfig(num_workers=n, placement_strategy="STRICT_SPREAD")


def _run_torch(storage: str) -> dict:
    from engine import RunConfig
    from engine.torch import TorchTrainer

    result = TorchTrainer(_ddp_loop, train_loop_config={"epochs": 3},
                          scaling_config=_spread(),
                          run_config=RunConfig(name="torch", storage_path=storage,
                                               verbose=0)).fit()
    return {"metrics": _plain(result.metrics), "last_round": _last_round(result),
            "checkpoint_uri": result.checkpoint.uri,
            "checkpoint_epoch": result.checkpoint.to_dict()["epoch"]}


def _run_xgboost(storage: str) -> dict:
    from sklearn.datasets import load_breast_cancer

    from engine import RunConfig
    from engine.xgboost import XGBoostPredictor, XGBoostTrainer

    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    df = x.assign(target=y)
    params = {"objective": "binary:logistic", "eval_metric": "logloss", "max_depth": 3,
              "nthread": 1}
    result = XGBoostTrainer(_xgb_loop, train_loop_config={"params": params, "rounds": 10},
                            datasets={"train": df}, scaling_config=_spread(),
                            run_config=RunConfig(name="xgboost", storage_path=storage,
                                                 verbose=0)).fit()
    preds = XGBoostPredictor.from_checkpoint(result.checkpoint).predict(x)
    accuracy = float(((preds["predictions"].to_numpy() > 0.5) == y.to_numpy()).mean())
    return {"last_round": _last_round(result), "train_rows": len(df),
            "world_size": result.metrics["world_size"], "accuracy": accuracy,
            "checkpoint_uri": result.checkpoint.uri,
            "num_boosted_rounds": XGBoostTrainer.get_model(result.checkpoint)
            .num_boosted_rounds()}


def _run_tune(storage: str) -> dict:
    from engine import RunConfig
    from engine.torch import TorchTrainer
    from engine.tune import TuneConfig, Tuner, grid_search

    trainer = TorchTrainer(_ddp_loop, train_loop_config={"epochs": 2},
                           scaling_config=_spread())
    grid = Tuner(trainer, param_space={"train_loop_config": {"lr": grid_search([0.05, 0.2])}},
                 tune_config=TuneConfig(metric="loss", mode="min"),
                 run_config=RunConfig(name="tune", storage_path=storage, verbose=0)).fit()
    trials = []
    for result in grid:
        rows = _last_round(result) if result.error is None else []
        trials.append({"lr": result.config["train_loop_config"]["lr"],
                       "node_ranks": [r["node_rank"] for r in rows],
                       "local_ranks": [r["local_rank"] for r in rows],
                       "checkpoint_uri": result.checkpoint.uri if result.checkpoint else None,
                       "error": None if result.error is None else str(result.error)})
    best = grid.get_best_result()
    return {"trials": trials, "num_errors": grid.num_errors,
            "experiment_path": grid.experiment_path,
            "best_lr": best.config["train_loop_config"]["lr"]}


def _replace_worker_node(cluster, marker: str, fit_thread: threading.Thread) -> dict:
    """Once ``marker`` exists (rank 0 finished that epoch), remove the worker node and add
    a fresh one in its place: an outside fault, like a lost cloud instance. Runs in the
    main thread (Ray's node start-up installs signal handlers) while ``fit()`` runs in
    another."""
    deadline = time.monotonic() + 300
    while not os.path.exists(marker):
        if not fit_thread.is_alive() or time.monotonic() > deadline:
            return {"removed": None, "added": None}
        time.sleep(0.05)
    node = next(iter(cluster.worker_nodes))
    cluster.remove_node(node)
    return {"removed": node.node_id, "added": cluster.add_node(num_cpus=2).node_id}


def _run_node_failure(storage: str, cluster, marker_dir: str) -> dict:
    from engine import FailureConfig, RunConfig
    from engine.torch import TorchTrainer

    os.makedirs(marker_dir, exist_ok=True)
    trainer = TorchTrainer(
        _ddp_loop, train_loop_config={"epochs": FAIL_EPOCHS, "epoch_delay_s": 1.0,
                                      "marker_dir": marker_dir},
        scaling_config=_spread(),
        run_config=RunConfig(name="node_failure", storage_path=storage, verbose=0,
                             failure_config=FailureConfig(max_failures=2)))
    outcome: dict = {}

    def fit() -> None:
        try:
            outcome["result"] = trainer.fit()
        except Exception as exc:
            outcome["error"] = exc

    fit_thread = threading.Thread(target=fit, daemon=True)
    fit_thread.start()
    # After epoch 2: checkpoints 0 and 1 are committed, epochs 3-5 still to come.
    nodes = _replace_worker_node(cluster, os.path.join(marker_dir, "epoch_2"), fit_thread)
    fit_thread.join(timeout=400)
    error = outcome.get("error")
    result = outcome.get("result") or getattr(error, "result", None)
    out = {"error": None if error is None else repr(error), **nodes}
    if result is not None:
        out.update(metrics=_plain(result.metrics), num_failures=result.num_failures,
                   last_round=_last_round(result),
                   epochs=[int(e) for e in result.metrics_dataframe["epoch"]])
    return out


def _plain(metrics: dict) -> dict:
    return json.loads(json.dumps(metrics, default=str))


def _timed(name: str, fn, *args):
    start = time.monotonic()
    try:
        return fn(*args)
    finally:
        print(f"[multinode] {name}: {time.monotonic() - start:.1f} s", flush=True)


def main(storage: str, out: str, marker_dir: str) -> int:
    import ray
    from ray.cluster_utils import Cluster

    started = time.monotonic()
    os.environ.setdefault("TRAINYARD_PLACEMENT_GROUP_TIMEOUT_S", "120")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=True)
    print(f"[multinode] cluster up: {time.monotonic() - started:.1f} s", flush=True)
    result: dict = {}
    try:
        head = cluster.head_node.node_id
        initial = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        result["torch"] = _timed("torch", _run_torch, storage)
        result["xgboost"] = _timed("xgboost", _run_xgboost, storage)
        result["tune"] = _timed("tune", _run_tune, storage)
        fail = _timed("node_failure", _run_node_failure, storage, cluster, marker_dir)
        result["node_failure"] = fail
        result["nodes"] = {"head": head, "initial": initial, "removed": fail.pop("removed"),
                           "added": fail.pop("added")}
    finally:
        with open(out + ".tmp", "w") as fh:
            json.dump(result, fh, default=str)
        os.replace(out + ".tmp", out)
        ray.shutdown()
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
