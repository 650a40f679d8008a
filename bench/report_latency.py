"""Per-call cost of a metrics-only ``report({"i": i})`` with 2 workers, warm local Ray.

A report cannot time itself, so ``train_func`` times each call with
``time.perf_counter()`` around it and rank 0 writes the list to a JSON file named in
``config``. Ours: ``engine.report``; anchor: ``ray.train.report`` (Ray Train V2 holds each
call at a barrier for ~2 s, so the anchor makes fewer calls).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Dict

from bench._child import read_json, write_json
from bench.core import Context, Metric, Target, Workload, percentile, register

NUM_WORKERS = 2


def _calls(quick: bool, side: str) -> int:
    if side == "ours":
        return 20 if quick else 200
    return 3 if quick else 5


def ours_train_func(config: Dict[str, Any]) -> None:
    import engine

    latencies = []
    for i in range(config["n"]):
        t0 = time.perf_counter()
        engine.report({"i": i})
        latencies.append(time.perf_counter() - t0)
    if engine.get_context().get_world_rank() == 0:
        write_json(config["out"], {"latencies_s": latencies})


def anchor_train_func(config: Dict[str, Any]) -> None:
    import ray.train

    latencies = []
    for i in range(config["n"]):
        t0 = time.perf_counter()
        ray.train.report({"i": i})
        latencies.append(time.perf_counter() - t0)
    if ray.train.get_context().get_world_rank() == 0:
        write_json(config["out"], {"latencies_s": latencies})


def _summarize(path, fit_wall: float) -> Dict[str, Any]:
    lat_ms = [x * 1e3 for x in read_json(path)["latencies_s"]]
    return {
        "median_ms": statistics.median(lat_ms),
        "p99_ms": percentile(lat_ms, 99),
        "first_ms": lat_ms[0],
        "median_after_first_ms": statistics.median(lat_ms[1:]) if len(lat_ms) > 1 else None,
        "calls": len(lat_ms),
        "fit_wall_s": fit_wall,
    }


def _setup(quick: bool) -> None:
    import engine.torch  # noqa: F401
    import ray.train.torch  # noqa: F401


def run_ours(ctx: Context) -> Dict[str, Any]:
    from engine import RunConfig, ScalingConfig
    from engine.torch import TorchTrainer

    out = ctx.workdir / "latencies.json"
    trainer = TorchTrainer(ours_train_func,
                           train_loop_config={"n": _calls(ctx.quick, "ours"), "out": str(out)},
                           scaling_config=ScalingConfig(num_workers=NUM_WORKERS),
                           run_config=RunConfig(storage_path=str(ctx.workdir / "runs")))
    t0 = time.perf_counter()
    trainer.fit()
    return _summarize(out, time.perf_counter() - t0)


def run_anchor(ctx: Context) -> Dict[str, Any]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    out = ctx.workdir / "latencies.json"
    trainer = TorchTrainer(anchor_train_func,
                           train_loop_config={"n": _calls(ctx.quick, "anchor"),
                                              "out": str(out)},
                           scaling_config=ScalingConfig(num_workers=NUM_WORKERS),
                           run_config=RunConfig(storage_path=str(ctx.workdir / "runs")))
    t0 = time.perf_counter()
    trainer.fit()
    return _summarize(out, time.perf_counter() - t0)


register(Workload(
    name="report_latency",
    description="metrics-only report({'i': i}) per call, 2 workers, warm local Ray",
    anchor="Ray Train ray.train.report (V2)",
    run_ours=run_ours,
    run_anchor=run_anchor,
    metrics=[
        Metric("median_ms", "ms", Target("abs_max", 1.0), "median per-call latency, rank 0"),
        Metric("p99_ms", "ms", None, "p99 per-call latency, rank 0"),
    ],
    ray_mode="warm",
    setup=_setup,
    sizes=lambda quick: {"num_workers": NUM_WORKERS,
                         "calls_ours": _calls(quick, "ours"),
                         "calls_anchor": _calls(quick, "anchor")},
    rep_timeout_s=300.0,
    notes=["The anchor makes fewer calls (Ray Train V2 blocks ~2 s per report)."],
))
