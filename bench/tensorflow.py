"""A small Keras job on 2 workers under MultiWorkerMirroredStrategy: in-loop time.

Ours: a fresh ``python -m bench.tensorflow --child ours ...`` process that runs
``engine.tensorflow.TensorflowTrainer(trainyard_train_func)`` (Ray started by the engine,
``TF_CONFIG`` set by the backend, Keras logs reported every epoch through
``ReportCheckpointCallback``), like a user's script. Anchor: the same job hand-started
as 2 plain processes with ``TF_CONFIG`` (``python -m bench.tensorflow --child anchor
...`` launches them on free loopback ports; all through ``bench._child``), no report.
Both run :func:`run_job`: the same data, model, seeds, batch size and epochs; rank 0
times the loop itself (start of the first epoch → end of the last) and writes it to a
JSON file.

Both sides' processes get ``TF_USE_LEGACY_KERAS=1`` (Keras 3 does not train under the
strategy) and ``OMP_NUM_THREADS=1``, as Ray gives a 1-CPU worker, so the thread setup is
the same. The runner's own Ray is shut down first (``ray_mode="none"``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

from bench._child import (Phases, child_command, child_env, child_main, fit_and_count,
                          loop_summary, process_report, read_json, run_child, write_json)
from bench.core import Context, Metric, Target, Workload, register

NPROC = 2
ROWS = 16384
FEATURES = 32
HIDDEN = 64
WORKER_BATCH = 128
LR = 1e-3
SEED = 0
WORKER_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"}


def _epochs(quick: bool) -> int:
    return 3 if quick else 30


# --- the job both sides run ------------------------------------------------------------
def run_job(epochs: int, on_epoch_end: Optional[Callable[[int, Dict[str, Any]], None]] = None
            ) -> Dict[str, Any]:
    """Build the strategy (from TF_CONFIG), the data and the model, train ``epochs``
    epochs; returns rank 0's timings. ``on_epoch_end(epoch, logs)`` runs after each
    epoch's timestamp (ours reports there)."""
    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(ROWS, FEATURES)).astype("float32")
    w = rng.normal(size=(FEATURES, 1)).astype("float32")
    y = x @ w + 0.1 * rng.normal(size=(ROWS, 1)).astype("float32")
    with strategy.scope():
        tf.keras.utils.set_random_seed(SEED)
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(HIDDEN, activation="relu", input_shape=(FEATURES,)),
            tf.keras.layers.Dense(HIDDEN, activation="relu"),
            tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.Adam(LR), loss="mse")
    # Keras shards numpy input across the workers (each trains on its half); the batch
    # is the global one.
    ends: List[float] = []
    cpu: List[float] = []

    class Timer(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 0:
                ends.append(time.perf_counter())
                cpu.append(time.process_time())

        def on_epoch_end(self, epoch, logs=None):
            ends.append(time.perf_counter())
            if on_epoch_end is not None:
                on_epoch_end(epoch, logs)

    history = model.fit(x, y, batch_size=WORKER_BATCH * strategy.num_replicas_in_sync,
                        epochs=epochs, verbose=0, callbacks=[Timer()])
    loop_cpu = time.process_time() - cpu[0]
    epoch_s = sorted(b - a for a, b in zip(ends, ends[1:]))
    to_unix = time.time() - time.perf_counter()
    return {
        "in_loop_s": ends[-1] - ends[0], "loop_start_unix": ends[0] + to_unix,
        "loop_end_unix": ends[-1] + to_unix, "first_epoch_s": ends[1] - ends[0],
        "epoch_median_s": epoch_s[len(epoch_s) // 2], "epoch_max_s": epoch_s[-1],
        "loop_cpu_s": loop_cpu, "final_loss": float(history.history["loss"][-1]),
        "replicas": strategy.num_replicas_in_sync, "epochs": epochs,
        "keras": type(model).__module__.split(".")[0],
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "tf_intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "pid": os.getpid(),
    }


def trainyard_train_func(config: Dict[str, Any]) -> None:
    """Ours: the job, reporting Keras's logs every epoch (as ReportCheckpointCallback
    does with ``checkpoint_on=[]``)."""
    import engine
    from engine.tensorflow._logs import select_metrics

    out = run_job(config["epochs"], on_epoch_end=lambda epoch, logs: engine.report(
        dict(select_metrics(logs or {}, None), epoch=epoch)))
    if engine.get_context().get_world_rank() == 0:
        write_json(config["out"], dict(out, framework="trainyard"))


# --- sides ---------------------------------------------------------------------------
def run_ours(ctx: Context) -> Dict[str, Any]:
    loop_out = ctx.workdir / "loop.json"
    wall, info = run_child(ctx, "bench.tensorflow", "ours", {
        "epochs": _epochs(ctx.quick), "loop_out": str(loop_out),
        "storage": str(ctx.workdir / "runs")},
        env=child_env(TF_CPP_MIN_LOG_LEVEL="2"), log_name="trainyard")
    return {"whole_wall_s": wall, **_loop_extra(ctx, read_json(loop_out)), **info}


def run_anchor(ctx: Context) -> Dict[str, Any]:
    loop_out = ctx.workdir / "loop.json"
    wall, _ = run_child(ctx, "bench.tensorflow", "anchor",
                        {"epochs": _epochs(ctx.quick), "loop_out": str(loop_out)},
                        log_name="mwms")
    return {"whole_wall_s": wall, **_loop_extra(ctx, read_json(loop_out))}


def _loop_extra(ctx: Context, loop: Dict[str, Any]) -> Dict[str, Any]:
    return loop_summary(ctx, loop, (
        "in_loop_s", "final_loss", "first_epoch_s", "epoch_median_s", "epoch_max_s",
        "loop_cpu_s", "replicas", "keras", "omp_num_threads", "tf_intra_op_threads"))


# --- processes -------------------------------------------------------------------------
def ours_process(epochs: int, loop_out: str, storage: str) -> Dict[str, Any]:
    """Ours' whole process: what a user's ``python train.py`` does."""
    phases = Phases()
    from engine import RunConfig, ScalingConfig
    from engine.tensorflow import TensorflowTrainer

    phases.mark("imports_s")
    from engine.runtime import ensure_ray

    ensure_ray()  # fit() starts Ray itself; started here first only to time that step apart
    phases.mark("ray_start_s")
    trainer = TensorflowTrainer(trainyard_train_func,
                                train_loop_config={"epochs": epochs, "out": loop_out},
                                scaling_config=ScalingConfig(num_workers=NPROC),
                                run_config=RunConfig(storage_path=storage))
    ray_objects = fit_and_count(trainer, phases, epochs)
    import ray

    ray.shutdown()
    phases.mark("ray_shutdown_s")
    return process_report(phases.seconds, ray_objects)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def anchor_main(epochs: int, loop_out: str) -> None:
    """The anchor's launcher: 2 plain processes with TF_CONFIG, like a user starting
    ``python train.py`` on each worker by hand."""
    addresses = [f"127.0.0.1:{_free_port()}" for _ in range(NPROC)]
    procs = []
    for index in range(NPROC):
        env = dict(os.environ, **WORKER_ENV, TF_CONFIG=json.dumps(
            {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}))
        cmd = child_command("bench.tensorflow", "anchor_worker",
                            {"epochs": epochs, "loop_out": loop_out})
        procs.append(subprocess.Popen(cmd, env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"anchor workers exited with {codes}")


def anchor_worker_main(epochs: int, loop_out: str) -> None:
    out = run_job(epochs)
    if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
        write_json(loop_out, dict(out, framework="mwms"))


register(Workload(
    name="tensorflow",
    description=(f"Keras MLP {FEATURES}→{HIDDEN}→{HIDDEN}→1, {ROWS:,} rows, batch "
                 f"{WORKER_BATCH}/worker, MultiWorkerMirroredStrategy, 2 procs, report "
                 "every epoch"),
    anchor="2 hand-started processes with TF_CONFIG (plain MultiWorkerMirroredStrategy, "
           "no report)",
    run_ours=run_ours,
    run_anchor=run_anchor,
    metrics=[
        Metric("in_loop_s", "s", Target("ratio_max", 1.2),
               "rank 0: first epoch start → end of last epoch"),
        Metric("whole_wall_s", "s", None,
               "whole process, start to exit (ours includes Ray start and shutdown)"),
    ],
    ray_mode="none",
    sizes=lambda quick: {"epochs": _epochs(quick), "rows": ROWS, "features": FEATURES,
                         "hidden": HIDDEN, "worker_batch_size": WORKER_BATCH,
                         "nproc": NPROC, "keras": "tf-keras (Keras 2)"},
    rep_timeout_s=600.0,
    notes=["Both sides' TensorFlow processes run with OMP_NUM_THREADS=1 (what Ray gives "
           "a 1-CPU actor) and TF_USE_LEGACY_KERAS=1.",
           "Ours' driver RSS is the fresh child process's; the anchor's is its launcher's."],
))


if __name__ == "__main__":
    child_main({"ours": ours_process, "anchor": anchor_main,
                "anchor_worker": anchor_worker_main})
