"""The DDP bench job under Horovod (Gloo), 2 processes: in-loop and whole-process time.

Both sides run the same loop: ``bench/ddp_loop.py``'s Linear(32 → 1), 4,096 rows,
batch 256, SGD, with ``hvd.DistributedOptimizer`` (gradients averaged, as DDP does),
``hvd.broadcast_parameters`` from rank 0 and a ``DistributedSampler`` over Horovod's
ranks (seed 0, ``set_epoch(epoch)``), so both end at the same loss.

Ours: a fresh ``python -m bench.horovod --child ours ...`` process (``bench._child``)
running ``engine.horovod.HorovodTrainer`` (Ray started by the engine, a report every
epoch). Anchor: ``horovodrun -np 2 -H localhost:2 --gloo python -m bench.horovod
--child anchor ...`` (no report). Rank 0 times the loop itself (first epoch start → end
of the last epoch).
Both sides run one torch thread per process (Ray gives a 1-CPU worker
``OMP_NUM_THREADS=1``; the anchor gets the same), like torchrun in the ``ddp`` row.

This module imports neither torch nor horovod until a child process runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Dict, List

from bench._child import child_env, child_main, read_json, run_child
from bench.core import Context, Metric, Target, Workload, register

NPROC = 2


def _epochs(quick: bool) -> int:
    return 20 if quick else 200


def _horovodrun() -> str:
    path = Path(sys.executable).parent / "horovodrun"
    if not path.exists():
        from engine.horovod.config import INSTALL_HINT

        raise RuntimeError(f"{path} not found. {INSTALL_HINT}")
    return str(path)


def run_ours(ctx: Context) -> Dict[str, Any]:
    loop_out = ctx.workdir / "loop.json"
    wall, _ = run_child(ctx, "bench.horovod", "ours", {
        "epochs": _epochs(ctx.quick), "out": str(loop_out),
        "storage": str(ctx.workdir / "runs")}, log_name="trainyard")
    return {"whole_wall_s": wall, **_loop_extra(read_json(loop_out))}


def run_anchor(ctx: Context) -> Dict[str, Any]:
    loop_out = ctx.workdir / "loop.json"
    launcher = [_horovodrun(), "-np", str(NPROC), "-H", f"localhost:{NPROC}", "--gloo",
                sys.executable]
    wall, _ = run_child(ctx, "bench.horovod", "anchor",
                        {"epochs": _epochs(ctx.quick), "out": str(loop_out)},
                        env=child_env(OMP_NUM_THREADS="1"), log_name="horovodrun",
                        launcher=launcher)
    return {"whole_wall_s": wall, **_loop_extra(read_json(loop_out))}


def _loop_extra(loop: Dict[str, Any]) -> Dict[str, Any]:
    keys = ("in_loop_s", "final_loss", "first_epoch_s", "epoch_median_s", "epoch_max_s",
            "loop_cpu_s", "torch_threads", "omp_num_threads", "steps_per_epoch_per_rank")
    return {k: loop.get(k) for k in keys}


# --- the loop (runs in the children) --------------------------------------------------
def _setup(hvd: Any) -> tuple:
    """Model, loader, sampler and Horovod optimizer, the same on both sides."""
    import torch  # noqa: F401
    from torch.utils.data import DataLoader, DistributedSampler

    from bench.ddp_loop import BATCH_SIZE, _optimizer, make_dataset, make_model

    hvd.init()
    model = make_model()
    dataset = make_dataset()
    sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank(),
                                 shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(_optimizer(model),
                                         named_parameters=model.named_parameters())
    return model, loader, sampler, optimizer


def trainyard_train_func(config: Dict[str, Any]) -> None:
    """Ours: the loop under HorovodTrainer, reporting every epoch."""
    import horovod.torch as hvd

    import engine
    from bench.ddp_loop import run_epochs, write_result

    model, loader, sampler, optimizer = _setup(hvd)
    ends: List[float] = []
    in_loop_s, loss = run_epochs(
        model, loader, optimizer, config["epochs"],
        on_epoch_end=lambda epoch, l: engine.report({"epoch": epoch, "loss": l}),
        before_epoch=sampler.set_epoch, epoch_ends=ends)
    if hvd.rank() == 0:
        write_result(config["out"], "trainyard-horovod", config["epochs"], in_loop_s, loss,
                     len(loader), ends)


def anchor_main(epochs: int, out: str) -> None:
    """The anchor: one process of ``horovodrun -np 2 --gloo``."""
    import horovod.torch as hvd

    from bench.ddp_loop import run_epochs, write_result

    model, loader, sampler, optimizer = _setup(hvd)
    ends: List[float] = []
    in_loop_s, loss = run_epochs(model, loader, optimizer, epochs,
                                 on_epoch_end=lambda epoch, l: None,
                                 before_epoch=sampler.set_epoch, epoch_ends=ends)
    if hvd.rank() == 0:
        write_result(out, "horovodrun", epochs, in_loop_s, loss, len(loader), ends)
    hvd.shutdown()


def ours_process(epochs: int, out: str, storage: str) -> None:
    """Ours: what a user's ``python train.py`` with a HorovodTrainer does."""
    from bench.horovod import trainyard_train_func  # by reference, not as __main__'s
    from engine import RunConfig, ScalingConfig
    from engine.horovod import HorovodTrainer

    result = HorovodTrainer(
        trainyard_train_func,
        train_loop_config={"epochs": epochs, "out": out},
        scaling_config=ScalingConfig(num_workers=NPROC),
        run_config=RunConfig(storage_path=storage),
    ).fit()
    assert result.metrics["epoch"] == epochs - 1, result.metrics


register(Workload(
    name="horovod",
    description="the ddp job (Linear(32→1), 4,096 rows, batch 256) with "
                "hvd.DistributedOptimizer, report every epoch, 2 procs, Gloo",
    anchor="horovodrun -np 2 --gloo (same Horovod loop, no report)",
    run_ours=run_ours,
    run_anchor=run_anchor,
    metrics=[
        Metric("in_loop_s", "s", Target("ratio_max", 1.1),
               "rank 0: first epoch start → end of last epoch"),
        Metric("whole_wall_s", "s", None,
               "whole process, start to exit (ours includes Ray start and shutdown)"),
    ],
    ray_mode="none",
    sizes=lambda quick: {"epochs": _epochs(quick), "rows": 4096, "batch_size": 256,
                         "model": "Linear(32, 1)", "nproc": NPROC, "controller": "gloo"},
    rep_timeout_s=600.0,
    notes=["Both sides: one torch thread per process (OMP_NUM_THREADS=1).",
           "Horovod 0.28.1 built by scripts/install_horovod.sh (make bench installs it)."],
))


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    child_main({"ours": ours_process, "anchor": anchor_main})
