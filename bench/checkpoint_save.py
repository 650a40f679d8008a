"""Saving a 200 MB checkpoint (2 workers × 100 MB shard) durably to local storage.

Ours: each rank passes a directory holding its 100 MB shard to ``report(checkpoint=...)``;
the time runs from the first rank entering ``report()`` to the driver's commit of the
checkpoint (files copied and fsynced by the ranks, marker written and fsynced).
Anchor: ``shutil.copytree`` of the same two 100 MB directories followed by an fsync of
every copied file, the floor for a durable copy on this disk. Throughput is 200 MB
divided by the time; the target is ours ≥ 0.7× the anchor's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any, Dict

from bench.core import Context, Metric, Target, Workload, register

NUM_WORKERS = 2


def _shard_mb(quick: bool) -> int:
    return 10 if quick else 100


def _write_shard(directory: str, rank: int, mb: int) -> None:
    os.makedirs(directory, exist_ok=True)
    block = os.urandom(1024 * 1024)
    with open(os.path.join(directory, f"shard_{rank}.bin"), "wb") as fh:
        for _ in range(mb):
            fh.write(block)


def _train_func(config: Dict[str, Any]) -> None:
    import engine

    rank = engine.get_context().get_world_rank()
    d = tempfile.mkdtemp(prefix="bench_ckpt_")
    _write_shard(d, rank, config["mb"])
    t0 = time.time()
    engine.report({"t_enter": t0}, checkpoint=engine.Checkpoint.from_directory(d))
    shutil.rmtree(d, ignore_errors=True)


def run_ours(ctx: Context) -> Dict[str, Any]:
    from engine import RunConfig, ScalingConfig
    from engine.callbacks import Callback
    from engine.torch import TorchTrainer

    class Timing(Callback):
        def __init__(self) -> None:
            self.enter = []
            self.committed = None

        def on_report(self, metrics, all_metrics):
            self.enter = [m["t_enter"] for m in all_metrics]

        def on_checkpoint(self, checkpoint, metrics):
            self.committed = time.time()

    timing = Timing()
    mb = _shard_mb(ctx.quick)
    TorchTrainer(_train_func, train_loop_config={"mb": mb},
                 scaling_config=ScalingConfig(num_workers=NUM_WORKERS),
                 run_config=RunConfig(storage_path=str(ctx.workdir / "store"), verbose=0,
                                      callbacks=[timing])).fit()
    seconds = timing.committed - min(timing.enter)
    total = mb * NUM_WORKERS
    return {"save_s": seconds, "throughput_mb_s": total / seconds, "total_mb": total}


def run_anchor(ctx: Context) -> Dict[str, Any]:
    mb = _shard_mb(ctx.quick)
    sources = []
    for rank in range(NUM_WORKERS):
        src = ctx.workdir / f"src_{rank}"
        _write_shard(str(src), rank, mb)
        sources.append(src)
    t0 = time.perf_counter()
    for rank, src in enumerate(sources):
        dst = ctx.workdir / "store" / f"copy_{rank}"
        shutil.copytree(src, dst)
        for name in os.listdir(dst):
            fd = os.open(dst / name, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    seconds = time.perf_counter() - t0
    total = mb * NUM_WORKERS
    return {"save_s": seconds, "throughput_mb_s": total / seconds, "total_mb": total}


def _setup(quick: bool) -> None:
    import engine.torch  # noqa: F401


register(Workload(
    name="checkpoint_save",
    description="durable save of a 2 × 100 MB checkpoint to local storage",
    anchor="shutil.copytree + fsync of the same files",
    run_ours=run_ours,
    run_anchor=run_anchor,
    metrics=[Metric("throughput_mb_s", "MB/s", Target("ratio_min", 0.7),
                    "200 MB / (first report() entered → checkpoint committed)")],
    ray_mode="warm",
    setup=_setup,
    sizes=lambda quick: {"num_workers": NUM_WORKERS, "shard_mb": _shard_mb(quick)},
    rep_timeout_s=300.0,
))
