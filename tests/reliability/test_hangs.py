"""A collective that one rank never enters, in a framework whose collectives wait
forever (TensorFlow): the backend's watchdog (``TensorflowConfig(timeout_s)``) ends the
attempt, and the error says where every rank was."""

from __future__ import annotations

import time

import pytest

import engine
from engine import RunConfig, ScalingConfig, TrainingFailedError


# The watchdog counts from the workers' start until the first report, so it must outlast
# a worker's `import tensorflow`: more than 20 s on a loaded 2-core runner (2026-11-29,
# load average 12-20: the watchdog fired inside the import, not at the hang). Rank 1
# sleeps well past it.
WATCHDOG_S = 60


def _tf_hang():
    # A report after each slow step of the setup: the watchdog counts from the last
    # report, and importing TensorFlow or joining the strategy can take most of the
    # timeout on a loaded machine; only the collective below is meant to hang.
    import tensorflow as tf

    engine.report({"step": 0})
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    engine.report({"step": 1})
    if engine.get_context().get_world_rank() == 1:
        time.sleep(300)  # never reaches the all-reduce below
    total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
    engine.report({"step": 2, "total": float(total)})


def test_tensorflow_collective_hang_ends_at_the_watchdog(ray_start_4_cpus, storage_path):
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:  # importing it here leaks env vars
        pytest.skip("tensorflow is not installed: pip install 'trainyard[tensorflow]'")
    from engine.tensorflow import TensorflowConfig, TensorflowTrainer

    with pytest.raises(TrainingFailedError) as info:
        TensorflowTrainer(_tf_hang, tensorflow_config=TensorflowConfig(timeout_s=WATCHDOG_S),
                          scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(storage_path=storage_path, verbose=0)).fit()
    message = str(info.value)
    assert (f"no rank reported for {WATCHDOG_S} s (TensorflowConfig(timeout_s={WATCHDOG_S}))"
            in message)
    assert "rank 1 was at:" in message and "time.sleep(300)" in message
    assert "rank 0 was at:" in message and "strategy.reduce" in message
    assert info.value.result.metrics["step"] == 1
