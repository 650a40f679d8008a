"""``engine.reuse_workers()``: inside the block a fit starts on the workers a tune (or an
earlier fit) finished with, torch's process group set up afresh on them; other idle
groups are stopped when a fit takes one, and all of them when the block ends."""

from __future__ import annotations

import os
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


def _gone(pids, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = {p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE}
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
