"""The tiny DDP job, 2 processes, gloo: whole-process wall and in-loop time.

Ours: a fresh ``python -m bench.ddp --child ...`` process that runs
``engine.torch.TorchTrainer(bench.ddp_loop.trainyard_train_func)`` — Ray started by the
engine's embedded default, reporting every epoch — like a user's script. Anchor:
``python -m torch.distributed.run --nproc_per_node=2 bench/ddp_loop.py`` (plain DDP, no
report). Both whole walls are measured by the runner from process start to exit; the
in-loop time is measured by rank 0 inside the shared loop (``bench/ddp_loop.py``).
The runner's own Ray is shut down first (``ray_mode="none"``) so no idle cluster
competes for the CPUs.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any, Dict

from bench.core import (Context, Metric, Target, Workload, child_env, count_ray_objects,
                        read_json, register, runner_maxrss_bytes, write_json)

NPROC = 2


def _epochs(quick: bool) -> int:
    return 20 if quick else 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ours(ctx: Context) -> Dict[str, Any]:
    loop_out = ctx.workdir / "loop.json"
    info_out = ctx.workdir / "child.json"
    cmd = [sys.executable, "-m", "bench.ddp", "--child", "--epochs", str(_epochs(ctx.quick)),
           "--loop-out", str(loop_out), "--info-out", str(info_out),
           "--storage", str(ctx.workdir / "runs")]
    wall = ctx.run_process(cmd, env=child_env(), log_name="trainyard")
    loop = read_json(loop_out)
    info = read_json(info_out)
    return {"whole_wall_s": wall, "in_loop_s": loop["in_loop_s"], **_loop_extra(ctx, loop),
            "child_phases_s": info["phases_s"],
            "child_ray_objects_after_fit": {k: v for k, v in info["ray_objects"].items()
                                            if k not in ("actor_ids", "placement_group_ids")},
            "child_maxrss_mb": info["maxrss_bytes"] / 2**20}


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
    keys = ("final_loss", "first_epoch_s", "epoch_median_s", "epoch_max_s", "loop_cpu_s",
            "torch_threads", "omp_num_threads", "steps_per_epoch_per_rank")
    out = {k: loop.get(k) for k in keys}
    if ctx.last_process_start_unix and loop.get("loop_start_unix"):
        out["start_to_loop_s"] = loop["loop_start_unix"] - ctx.last_process_start_unix
        out["loop_end_to_exit_s"] = ctx.last_process_end_unix - loop["loop_end_unix"]
    return out


def child_main(argv: list) -> None:
    """trainyard's whole process: what a user's ``python train.py`` does."""
    import time

    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--loop-out", required=True)
    parser.add_argument("--info-out", required=True)
    parser.add_argument("--storage", required=True)
    args = parser.parse_args(argv)

    t_main = time.perf_counter()
    from engine import RunConfig, ScalingConfig
    from engine.torch import TorchTrainer

    from bench.ddp_loop import trainyard_train_func

    t_imported = time.perf_counter()
    try:  # fit() starts Ray itself; started here first only to time that step apart
        from engine._internal.ray_utils import ensure_ray
    except ImportError:
        ensure_ray = None
    if ensure_ray is not None:
        ensure_ray()
    t_ray = time.perf_counter()
    result = TorchTrainer(
        trainyard_train_func,
        train_loop_config={"epochs": args.epochs, "out": args.loop_out},
        scaling_config=ScalingConfig(num_workers=NPROC),
        run_config=RunConfig(storage_path=args.storage),
    ).fit()
    t_fit = time.perf_counter()
    assert result.metrics["epoch"] == args.epochs - 1, result.metrics
    ray_objects = count_ray_objects()
    t_counted = time.perf_counter()
    # No ray.shutdown() here: a user's script leaves it to the interpreter's exit (the
    # engine's exit hook, then Ray's), which the whole wall includes.
    phases = {
        "imports_s": t_imported - t_main,
        "ray_start_s": t_ray - t_imported if ensure_ray is not None else None,
        "fit_s": t_fit - t_ray,
        "count_ray_objects_s": t_counted - t_fit,
    }
    write_json(args.info_out, {"phases_s": phases, "ray_objects": ray_objects,
                               "maxrss_bytes": runner_maxrss_bytes()})


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
    if "--child" in sys.argv[1:]:
        child_main(sys.argv[1:])
    else:
        sys.exit("usage: python -m bench.ddp --child ... (run by bench.run)")
