"""Load: many fits on one Ray instance leave nothing behind; a Tuner of 100 small trials
finishes with none stuck pending."""

from __future__ import annotations

import os
import threading
import time

import pytest

import engine
from engine import RunConfig, ScalingConfig
from engine.trainer import DataParallelTrainer
from engine.tune import TuneConfig, Tuner, grid_search

# 100 by the issue; TRAINYARD_LOAD_FITS lowers it for a quick local run.
FITS = int(os.environ.get("TRAINYARD_LOAD_FITS", "100"))


def _tiny(config):
    engine.report({"x": config["i"]})


def _alive():
    """Actors and placement groups alive in Ray (read from the GCS tables), and the
    driver's threads and open file descriptors."""
    import ray

    actors = sum(1 for a in ray._private.state.actors().values() if a["State"] == "ALIVE")
    pgs = sum(1 for pg in ray.util.placement_group_table().values()
              if pg["state"] == "CREATED")
    return {"actors": actors, "placement_groups": pgs,
            "threads": threading.active_count(), "fds": len(os.listdir("/proc/self/fd"))}


@pytest.mark.timeout(900)
def test_back_to_back_fits_do_not_accumulate_resources(ray_start_4_cpus, storage_path):
    samples = []
    for i in range(FITS):
        result = DataParallelTrainer(
            _tiny, train_loop_config={"i": i}, scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path=storage_path, verbose=0)).fit()
        assert result.metrics["x"] == i
        if i in (min(9, FITS - 2), FITS - 1):
            time.sleep(1.0)  # let Ray reap the last group's actors
            samples.append(_alive())
    after_10, after_100 = samples
    # Nothing grows with the number of fits: 90 more fits, the same counts.
    assert len(samples) == 2
    assert after_100["actors"] <= after_10["actors"], samples
    assert after_100["placement_groups"] <= after_10["placement_groups"], samples
    assert after_100["placement_groups"] == 0, samples
    assert after_100["threads"] <= after_10["threads"] + 2, samples
    assert after_100["fds"] <= after_10["fds"] + 10, samples


def test_tuner_of_100_small_trials_leaves_none_pending(ray_start_4_cpus, storage_path):
    grid = Tuner(_tiny, param_space={"i": grid_search(list(range(100)))},
                 tune_config=TuneConfig(metric="x", mode="max"),
                 run_config=RunConfig(storage_path=storage_path, verbose=0)).fit()
    assert len(grid) == 100 and grid.num_errors == 0, grid.errors
    assert grid.num_terminated == 100
    assert sorted(r.metrics["x"] for r in grid) == list(range(100))
    assert grid.get_best_result().metrics["x"] == 99
