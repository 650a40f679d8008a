"""The tiny DDP job, 2 processes, gloo: whole-process wall and in-loop time.

Ours: a fresh ``python -m bench.ddp --child ours ...`` process (``bench._child``) that runs
``engine.torch.TorchTrainer(bench.ddp_loop.trainyard_train_func)`` — Ray started by the
engine's embedded default, reporting every epoch — like a user's script. Anchor:
``python -m torch.distributed.run --nproc_per_node=2 bench/ddp_loop.py`` (plain DDP, no
report). Both whole walls are measured by the runner from process start to exit; the
in-loop time is measured by rank 0 inside the shared loop (``bench/ddp_loop.py``).
The runner's own Ray is shut down first (``ray_mode="none"``) so no idle cluster
competes for the CPUs.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any, Dict

from bench._child import (Phases, child_env, child_main, fit_and_count, loop_summary,
                          process_report, read_json, run_child)
from bench.core import Context, Metric, Target, Workload, register
from bench.xgboost import breakdown, run_marks

NPROC = 2
RUN_NAME = "ddp"


def _epochs(quick: bool) -> int:
    return 20 if quick else 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ours(ctx: Context) -> Dict[str, Any]:
    loop_out = ctx.workdir / "loop.json"
    wall, info = run_child(ctx, "bench.ddp", "ours", {
        "epochs": _epochs(ctx.quick), "loop_out": str(loop_out),
        "storage": str(ctx.workdir / "runs")}, log_name="trainyard")
    loop = read_json(loop_out)
    marks = info.pop("marks", None)
    if marks:
        info["breakdown_s"] = breakdown(marks, ctx.last_process_start_unix,
                                        ctx.last_process_end_unix)
    return {"whole_wall_s": wall, "in_loop_s": loop["in_loop_s"], **_loop_extra(ctx, loop),
            **info}


def run_anchor(ctx: Context) -> Dict[str, Any]:
    loop_out = ctx.workdir / "loop.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={NPROC}",
           "--master_addr=127.0.0.1", f"--master_port={_free_port()}",
           "bench/ddp_loop.py", "--epochs", str(_epochs(ctx.quick)), "--out", str(loop_out)]
    wall = ctx.run_process(cmd, env=child_env(), log_name="torchrun")
    loop = read_json(loop_out)
    return {"whole_wall_s": wall, "in_loop_s": loop["in_loop_s"], **_loop_extra(ctx, loop)}


def _loop_extra(ctx: Context, loop: Dict[str, Any]) -> Dict[str, Any]:
    """What rank 0 wrote, plus the whole wall split as process start → first epoch,
    the loop, and last epoch → process exit."""
    return loop_summary(ctx, loop, (
        "final_loss", "first_epoch_s", "epoch_median_s", "epoch_max_s", "loop_cpu_s",
        "loop_machine_cpu_s", "loop_ranks_cpu_s", "loop_others_cpu_s", "loop_cpu_by_kind",
        "torch_threads", "omp_num_threads", "steps_per_epoch_per_rank"))


def ours_process(epochs: int, loop_out: str, storage: str) -> Dict[str, Any]:
    """trainyard's whole process: what a user's ``python train.py`` does."""
    phases = Phases()
    # The first lines of the script, as docs/index.md recommends: Ray's local start runs in
    # a thread while the script imports torch (fit() would otherwise start it only then).
    from engine.runtime import ensure_ray

    ensure_ray(background=True)
    from engine import RunConfig, ScalingConfig
    from engine.torch import TorchTrainer

    from bench.ddp_loop import trainyard_train_func

    phases.mark("imports_s")
    imported = time.time()
    ensure_ray()  # what is left of Ray's start once the imports are done
    phases.mark("ray_start_s")
    ray_started = time.time()
    trainer = TorchTrainer(trainyard_train_func,
                           train_loop_config={"epochs": epochs, "out": loop_out},
                           scaling_config=ScalingConfig(num_workers=NPROC),
                           run_config=RunConfig(storage_path=storage, name=RUN_NAME))
    ray_objects = fit_and_count(trainer, phases, epochs)
    marks = run_marks(os.path.join(storage, RUN_NAME), imported)
    marks.append(("child", "ensure_ray", ray_started))
    # No ray.shutdown() here: a user's script leaves it to the interpreter's exit (the
    # engine's exit hook, then Ray's), which the whole wall includes.
    return dict(process_report(phases.seconds, ray_objects), marks=marks)


register(Workload(
    name="ddp",
    description="DDP Linear(32→1), 4,096 rows, batch 256, report every epoch, 2 procs, gloo",
    anchor="python -m torch.distributed.run --nproc_per_node=2 (plain DDP, no report)",
    run_ours=run_ours,
    run_anchor=run_anchor,
    metrics=[
        Metric("whole_wall_s", "s", Target("ratio_max", 1.25),
               "whole process, start to exit (ours includes Ray start and shutdown)"),
        Metric("in_loop_s", "s", Target("ratio_max", 1.05),
               "rank 0: first epoch start → end of last epoch"),
    ],
    ray_mode="none",
    sizes=lambda quick: {"epochs": _epochs(quick), "rows": 4096, "batch_size": 256,
                         "model": "Linear(32, 1)", "nproc": NPROC, "backend": "gloo"},
    rep_timeout_s=600.0,
    notes=["Ours' driver RSS is the fresh child process's; the anchor's is torchrun's "
           "launcher process.",
           "Ray objects for ours are counted inside the child right after fit() (its Ray "
           "exits with it); the anchor uses no Ray."],
))


if __name__ == "__main__":
    child_main({"ours": ours_process})
