"""``engine.reuse_workers()``: inside the block a fit starts on the workers a tune (or an
earlier fit) finished with, the framework's collective set up afresh on them (torch,
TensorFlow, Horovod, XGBoost, LightGBM, scikit-learn, Accelerate) and nothing of the
fit before left in the process; other idle groups are stopped when a fit takes one, and
all of them when the block ends.

The per-framework checks share one module fixture each (two fits in one block), since a
worker's framework import is what they cost (TensorFlow's is about 7 CPU-s a worker);
those fixtures join the session's Ray directly (``ray_session``, which is what
``ray_start_4_cpus`` returns), as a module fixture cannot take a per-test one.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

import psutil
import pytest

import engine
from engine import RunConfig, ScalingConfig
from engine.trainer import DataParallelTrainer
from engine.tune import TuneConfig, Tuner, grid_search


def _pids_of_ranks(config):
    import torch
    import torch.distributed as dist

    # A collective over the group proves its process group was set up for this run.
    total = torch.tensor([float(engine.get_context().get_world_rank() + 1)])
    dist.all_reduce(total)
    engine.report({"x": config.get("x", 0), "sum": float(total.item()),
                   "pids": ",".join(str(p) for p in _gather_pids())})


def _gather_pids():
    import torch.distributed as dist

    pids = [None] * dist.get_world_size()
    dist.all_gather_object(pids, os.getpid())
    return pids


def _torch_trainer(storage_path, name):
    from engine.torch import TorchTrainer

    return TorchTrainer(_pids_of_ranks, scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(name=name, storage_path=storage_path, verbose=0))


def _pids(result):
    return {int(p) for p in result.metrics["pids"].split(",")}


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not; one that exits while asked does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone(pids, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = {p for p in pids if _alive(p)}
        if not alive:
            return True
        time.sleep(0.2)
    return False


def test_the_fit_after_a_tune_runs_on_the_tunes_workers(ray_start_4_cpus, storage_path):
    with engine.reuse_workers():
        grid = Tuner(_torch_trainer(storage_path, "tune"),
                     param_space={"train_loop_config": {"x": grid_search([1, 2, 3])}},
                     tune_config=TuneConfig(max_concurrent_trials=1),
                     run_config=RunConfig(storage_path=storage_path, verbose=0)).fit()
        assert grid.num_errors == 0, grid.errors
        tune_pids = [_pids(r) for r in grid]
        assert tune_pids[0] == tune_pids[1] == tune_pids[2]  # one group, reused
        result = _torch_trainer(storage_path, "final").fit()
        assert result.error is None and result.metrics["sum"] == 3.0
        assert _pids(result) == tune_pids[0]
        assert all(psutil.pid_exists(p) for p in tune_pids[0])  # idle in the block
    assert _gone(tune_pids[0]), "the block's idle workers outlived it"


def _report_pid(config=None):
    engine.report({"pid": os.getpid()})


def test_without_the_block_each_fit_starts_its_own_workers(ray_start_4_cpus, storage_path):
    def fit():
        return DataParallelTrainer(_report_pid, scaling_config=ScalingConfig(num_workers=1),
                                   run_config=RunConfig(storage_path=storage_path,
                                                        verbose=0)).fit()

    first, second = fit().metrics["pid"], fit().metrics["pid"]
    assert first != second
    assert _gone({first, second})


def test_a_fit_stops_the_other_idle_groups_and_leaves_the_cpus_to_its_data(
        ray_start_4_cpus, storage_path):
    def report_pid(config):
        engine.report({"pid": os.getpid(), "rows": sum(
            len(b["v"]) for b in engine.get_dataset_shard("train").iter_batches(
                batch_format="numpy")) if config.get("data") else 0})

    scaling = ScalingConfig(num_workers=1)
    with engine.reuse_workers():
        # Two trials at once: two idle one-worker groups once the tune is done.
        grid = Tuner(DataParallelTrainer(report_pid, scaling_config=scaling),
                     param_space={"train_loop_config": {"x": grid_search([1, 2])}},
                     tune_config=TuneConfig(max_concurrent_trials=2),
                     run_config=RunConfig(storage_path=storage_path, verbose=0)).fit()
        tuned = {r.metrics["pid"] for r in grid}
        assert len(tuned) == 2
        import pandas as pd

        # A fit with a dataset: Ray Data needs a CPU besides the worker's. With both idle
        # groups holding theirs (4 CPUs, 2 taken) it would still fit; what it must show
        # is that the fit took one group and the other one was stopped.
        result = DataParallelTrainer(
            report_pid, train_loop_config={"data": True}, scaling_config=scaling,
            datasets={"train": pd.DataFrame({"v": range(1000)})},
            run_config=RunConfig(storage_path=storage_path, verbose=0)).fit()
        assert result.error is None and result.metrics["rows"] == 1000
        assert result.metrics["pid"] in tuned
        assert _gone(tuned - {result.metrics["pid"]})
        assert psutil.pid_exists(result.metrics["pid"])
    assert _gone(tuned)


def test_a_failed_fit_does_not_give_its_workers_back(ray_start_4_cpus, storage_path):
    def fail_once(config):
        engine.report({"pid": os.getpid()})
        if config.get("fail"):
            raise ValueError("boom")

    scaling = ScalingConfig(num_workers=1)
    with engine.reuse_workers():
        ok = DataParallelTrainer(fail_once, scaling_config=scaling,
                                 run_config=RunConfig(storage_path=storage_path,
                                                      verbose=0)).fit()
        failed = DataParallelTrainer(fail_once, train_loop_config={"fail": True},
                                     scaling_config=scaling,
                                     run_config=RunConfig(storage_path=storage_path,
                                                          verbose=0))
        with pytest.raises(engine.TrainingFailedError, match="boom"):
            failed.fit()
        assert _gone({ok.metrics["pid"]})  # it ran the failed fit, which killed it
        again = DataParallelTrainer(fail_once, scaling_config=scaling,
                                    run_config=RunConfig(storage_path=storage_path,
                                                         verbose=0)).fit()
        assert again.metrics["pid"] != ok.metrics["pid"]


def test_blocks_nest_and_only_the_outermost_stops_the_workers(ray_start_4_cpus, storage_path):
    def report_pid():
        engine.report({"pid": os.getpid()})

    def fit():
        return DataParallelTrainer(report_pid, scaling_config=ScalingConfig(num_workers=1),
                                   run_config=RunConfig(storage_path=storage_path,
                                                        verbose=0)).fit()

    with engine.reuse_workers():
        with engine.reuse_workers():
            first = fit().metrics["pid"]
        assert psutil.pid_exists(first)
        assert fit().metrics["pid"] == first
    assert _gone({first})


# --- nothing of one fit reaches the next ---------------------------------------------------
PROBE_ENV_VAR = "WORKER_REUSE_TEST_PROBE"  # not a TRAINYARD_ setting: the test's own
PROBE_MODULE = "tests.support.worker_reuse_probe"


def _leave_state_behind(config):
    """Reports what this process looks like, then (first fit) changes all of it."""
    import random

    import numpy as np
    import torch

    loaded = PROBE_MODULE in sys.modules
    from tests.support import worker_reuse_probe as probe

    seen = {"probe_loaded": loaded, "probe": probe.VALUE, "env": os.environ.get(PROBE_ENV_VAR),
            "cwd": os.getcwd(), "seed": torch.initial_seed(),
            "dtype": str(torch.get_default_dtype()),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "threads": torch.get_num_threads(), "random": random.random(),
            "numpy": float(np.random.random())}
    if config["first"]:
        os.environ[PROBE_ENV_VAR] = "left by the first fit"
        os.makedirs(config["chdir"], exist_ok=True)
        os.chdir(config["chdir"])
        probe.VALUE = "changed by the first fit"
        torch.manual_seed(123)
        torch.set_default_dtype(torch.float64)
        torch.use_deterministic_algorithms(True)
        torch.set_num_threads(torch.get_num_threads() + 1)
        random.seed(7)
        np.random.seed(7)
    engine.report(seen)


def test_the_next_fit_on_the_same_workers_sees_nothing_of_the_last(ray_start_4_cpus,
                                                                    storage_path, tmp_path):
    def fit(first):
        return DataParallelTrainer(
            _leave_state_behind, train_loop_config={"first": first,
                                                    "chdir": str(tmp_path / "elsewhere")},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path=storage_path, verbose=0)).fit()

    with engine.reuse_workers():
        first, second = fit(True), fit(False)
    assert _all_pids(first) == _all_pids(second) and len(_all_pids(first)) == 2
    import random

    import numpy as np

    for rank in (0, 1):
        before, after = _rank_metrics(first, rank), _rank_metrics(second, rank)
        assert after["env"] is None
        assert after["cwd"] != str(tmp_path / "elsewhere")
        assert after["probe_loaded"] is False and after["probe"] == "as imported"
        assert after["seed"] != 123 and after["seed"] != before["seed"]
        assert after["dtype"] == "torch.float32" and after["deterministic"] is False
        assert after["threads"] == before["threads"]
        assert after["random"] != random.Random(7).random()
        assert after["numpy"] != np.random.RandomState(7).random()


# --- every framework: two fits in one block, on the same processes, both training -------
def _all_pids(result):
    return set(result.worker_metrics_dataframe["pid"])


def _rank_metrics(result, rank):
    rows = result.worker_metrics_dataframe
    return rows[rows["rank"] == rank].iloc[-1].to_dict()


def _two_fits(make_trainer):
    with engine.reuse_workers():
        first = make_trainer("first").fit()
        second = make_trainer("second").fit()
    return first, second


def _two_loop_fits(trainer_cls, train_func, storage: str, configs=None):
    """Two 2-worker fits of ``train_func`` with ``trainer_cls`` in one reuse block
    (``configs``: each one's ``train_loop_config`` by run name)."""
    return _two_fits(lambda name: trainer_cls(
        train_func, train_loop_config=(configs or {}).get(name),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name=name, storage_path=storage, verbose=0)))


def _digest(values) -> str:
    import numpy as np

    return hashlib.sha256(np.round(np.asarray(values, dtype=np.float64), 6).tobytes()
                          ).hexdigest()


def _assert_same_workers_both_trained(fits, key):
    """Both fits ran on the same two processes and every rank ended with the same
    model (what only a working collective gives ranks that hold different data)."""
    first, second = fits
    assert first.error is None and second.error is None
    assert _all_pids(first) == _all_pids(second) and len(_all_pids(first)) == 2
    for result in fits:
        assert result.worker_metrics_dataframe.groupby("rank")[key].last().nunique() == 1


def _rank_data(rank, rows=200):
    import numpy as np

    x = np.random.default_rng(rank).random((rows, 4))
    return x, (x[:, 0] + x[:, 1] > 1.0).astype(np.float64)


def _tf_fit(config):
    import numpy as np
    import tensorflow as tf

    rank = engine.get_context().get_world_rank()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    # The second fit is another program (a hidden layer first): its collectives must not
    # meet the first fit's, which TensorFlow caches by key in the process.
    layers = [tf.keras.layers.Dense(config["hidden"])] if config.get("hidden") else []
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((4,)), *layers, tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    x, y = _rank_data(rank, rows=64)
    history = model.fit(x.astype(np.float32), y.astype(np.float32), epochs=2,
                        batch_size=16, verbose=0)
    total = strategy.reduce(tf.distribute.ReduceOp.SUM,
                            strategy.run(lambda: tf.constant(float(rank + 1))), axis=None)
    engine.report({"sum": float(total), "loss": float(history.history["loss"][-1]),
                   "weights": _digest(np.concatenate([w.ravel() for w in model.get_weights()])),
                   "variables": len(model.get_weights()),
                   "tf_config": os.environ["TF_CONFIG"],
                   "log_level": os.environ.get("TF_CPP_MIN_LOG_LEVEL")})


@pytest.fixture(scope="module")
def tf_fits(ray_session, tmp_path_factory):
    pytest.importorskip("tensorflow")
    from engine.tensorflow import TensorflowTrainer

    # The driver's own TensorFlow log level reaches the workers (the trainer's worker
    # environment, set in each actor before TensorFlow loads): a value neither the
    # trainer's default (2) nor what the session's Ray started with.
    saved = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    try:
        return _two_loop_fits(TensorflowTrainer, _tf_fit,
                              str(tmp_path_factory.mktemp("tf_reuse")),
                              configs={"first": {}, "second": {"hidden": 3}})
    finally:
        if saved is None:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
        else:
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = saved


def test_tensorflow_mwms_trains_two_programs_on_the_same_workers(tf_fits):
    _assert_same_workers_both_trained(tf_fits, "weights")
    assert [r.metrics["variables"] for r in tf_fits] == [2, 4]
    for result in tf_fits:
        assert result.metrics["sum"] == 3.0
        assert set(result.worker_metrics_dataframe["log_level"]) == {"1"}
    # The collective server cannot be set up again in a process: the group kept its ports.
    first, second = tf_fits
    assert first.metrics["tf_config"] == second.metrics["tf_config"]


def _hvd_fit(config):
    import horovod.torch as hvd
    import torch

    left_over = hvd.is_initialized()  # no hvd.shutdown() here: the reset must do it
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    x, y = (torch.from_numpy(a).float() for a in _rank_data(hvd.rank()))
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x).squeeze(1), y).backward()
        optimizer.step()
    engine.report({"sum": float(total.item()), "size": hvd.size(), "left_over": left_over,
                   "weights": _digest(torch.cat([p.detach().ravel()
                                                 for p in model.parameters()]))})


@pytest.fixture(scope="module")
def horovod_fits(ray_session, tmp_path_factory):
    from engine.horovod.config import INSTALL_COMMAND, horovod_installed

    if not horovod_installed():
        pytest.skip(f"horovod is not installed: run `{INSTALL_COMMAND}`")
    from engine.horovod import HorovodTrainer

    return _two_loop_fits(HorovodTrainer, _hvd_fit,
                          str(tmp_path_factory.mktemp("hvd_reuse")))


def test_horovod_is_shut_down_and_set_up_again_on_the_same_workers(horovod_fits):
    _assert_same_workers_both_trained(horovod_fits, "weights")
    for result in horovod_fits:
        assert result.metrics["sum"] == 3.0 and result.metrics["size"] == 2
    assert not any(_rank_metrics(horovod_fits[1], r)["left_over"] for r in (0, 1))


def _xgb_fit(config):
    import numpy as np
    import xgboost
    from xgboost import collective

    rank = collective.get_rank()
    x, y = _rank_data(rank)
    booster = xgboost.train({"objective": "binary:logistic", "max_depth": 2, "nthread": 1},
                            xgboost.DMatrix(x, label=y), num_boost_round=3)
    total = collective.allreduce(np.array([rank + 1.0]), collective.Op.SUM)
    grid = np.linspace(0, 1, 40).reshape(10, 4)
    engine.report({"sum": float(total[0]), "world": collective.get_world_size(),
                   "model": _digest(booster.predict(xgboost.DMatrix(grid)))})


@pytest.fixture(scope="module")
def xgboost_fits(ray_session, tmp_path_factory):
    pytest.importorskip("xgboost")
    from engine.xgboost import XGBoostTrainer

    return _two_loop_fits(XGBoostTrainer, _xgb_fit,
                          str(tmp_path_factory.mktemp("xgb_reuse")))


def test_xgboost_allreduces_in_a_new_collective_on_the_same_workers(xgboost_fits):
    _assert_same_workers_both_trained(xgboost_fits, "model")
    for result in xgboost_fits:
        assert result.metrics["sum"] == 3.0 and result.metrics["world"] == 2


def _lgb_fit(config):
    import lightgbm
    import numpy as np

    from engine.lightgbm import get_network_params

    x, y = _rank_data(engine.get_context().get_world_rank())
    params = dict(objective="binary", num_threads=1, verbose=-1, min_data_in_leaf=5,
                  **get_network_params())
    booster = lightgbm.train(params, lightgbm.Dataset(x, label=y), num_boost_round=3)
    engine.report({"machines": params["num_machines"],
                   "model": _digest(booster.predict(np.linspace(0, 1, 40).reshape(10, 4)))})


@pytest.fixture(scope="module")
def lightgbm_fits(ray_session, tmp_path_factory):
    pytest.importorskip("lightgbm")
    from engine.lightgbm import LightGBMTrainer

    return _two_loop_fits(LightGBMTrainer, _lgb_fit,
                          str(tmp_path_factory.mktemp("lgb_reuse")))


def test_lightgbm_joins_a_new_network_on_the_same_workers(lightgbm_fits):
    _assert_same_workers_both_trained(lightgbm_fits, "model")
    assert all(result.metrics["machines"] == 2 for result in lightgbm_fits)


@pytest.fixture(scope="module")
def accelerate_fits(ray_session, tmp_path_factory):
    pytest.importorskip("accelerate")
    from engine.huggingface import AccelerateTrainer

    return _two_loop_fits(AccelerateTrainer, _accelerate_fit,
                          str(tmp_path_factory.mktemp("accelerate_reuse")))


def _accelerate_fit(config):
    import torch
    from accelerate import Accelerator
    from accelerate.state import PartialState

    left_over = bool(PartialState._shared_state)  # the last fit's state, if not reset
    accelerator = Accelerator()
    total = accelerator.reduce(torch.tensor([float(accelerator.process_index + 1)]),
                               reduction="sum")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    x, y = (torch.from_numpy(a).float() for a in _rank_data(accelerator.process_index))
    for _ in range(3):
        optimizer.zero_grad()
        accelerator.backward(torch.nn.functional.mse_loss(model(x).squeeze(1), y))
        optimizer.step()
    engine.report({"sum": float(total.item()), "processes": accelerator.num_processes,
                   "left_over": left_over,
                   "weights": _digest(torch.cat([p.detach().ravel()
                                                 for p in model.parameters()]))})


def test_accelerate_sets_up_its_state_again_on_the_same_workers(accelerate_fits):
    _assert_same_workers_both_trained(accelerate_fits, "weights")
    for result in accelerate_fits:
        assert result.metrics["sum"] == 3.0 and result.metrics["processes"] == 2
    assert not any(_rank_metrics(accelerate_fits[1], r)["left_over"] for r in (0, 1))


def test_sklearn_fits_twice_on_the_same_worker(ray_start_4_cpus, storage_path):
    pytest.importorskip("sklearn")
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    from engine.sklearn import SklearnTrainer

    x, y = _rank_data(0)
    frame = pd.DataFrame(x, columns=["a", "b", "c", "d"]).assign(label=y)
    fits = _two_fits(lambda name: SklearnTrainer(
        estimator=LogisticRegression(), datasets={"train": frame, "validation": frame},
        label_column="label", run_config=RunConfig(name=name, storage_path=storage_path,
                                                   verbose=0)))
    assert _all_pids(fits[0]) == _all_pids(fits[1]) and len(_all_pids(fits[0])) == 1
    assert all(result.metrics["validation"]["test_score"] > 0.8 for result in fits)
