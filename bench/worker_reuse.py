"""10 sequential small 2-worker torch fits, inside ``engine.reuse_workers()`` and without.

Ours: the fits run in one ``engine.reuse_workers()`` block, so every fit after the first
starts on the processes the one before finished with (reset in between: process group
destroyed, environment and modules restored). Anchor: the same fits with no block,
each starting its own 2 workers (placement group, process start, ``import torch``) as
every fit did before the pool. Both sides run on the runner's warm local Ray, one
repetition of ours, then one of the anchor, and so on; the wall of the 10 ``fit()``
calls is measured in the runner. ``first_fit_s`` and ``later_fit_median_s`` split it:
the block's first fit starts workers as the anchor's do.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any, Dict, List

from bench.core import Context, Metric, Target, Workload, register

NUM_WORKERS = 2


def sizes(quick: bool) -> Dict[str, int]:
    return {"fits": 3 if quick else 10, "num_workers": NUM_WORKERS, "steps": 5}


def small_torch_fit(config: Dict[str, Any]) -> None:
    """A few DDP steps of a linear model on random data: a small real fit."""
    import torch

    import engine
    from engine.torch import prepare_model

    model = prepare_model(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.rand(64, 8), torch.rand(64, 1)
    for _ in range(config["steps"]):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    engine.report({"loss": float(loss.item())})


def _setup(quick: bool) -> None:
    import engine.torch  # noqa: F401 - driver-side import before any timed repetition


def _fits(ctx: Context, reuse: bool) -> Dict[str, Any]:
    import engine
    from engine import RunConfig, ScalingConfig
    from engine.torch import TorchTrainer

    s = sizes(ctx.quick)
    walls: List[float] = []
    block = engine.reuse_workers() if reuse else contextlib.nullcontext()
    t0 = time.perf_counter()
    with block:
        for i in range(s["fits"]):
            trainer = TorchTrainer(small_torch_fit, train_loop_config={"steps": s["steps"]},
                                   scaling_config=ScalingConfig(num_workers=NUM_WORKERS),
                                   run_config=RunConfig(name=f"fit_{i}", verbose=0,
                                                        storage_path=str(ctx.workdir)))
            t = time.perf_counter()
            result = trainer.fit()
            walls.append(time.perf_counter() - t)
            if result.error is not None:
                raise RuntimeError(f"fit {i} failed: {result.error}")
    wall = time.perf_counter() - t0  # with the block's exit: it stops the kept workers
    return {"wall_s": wall, "first_fit_s": walls[0],
            "later_fit_median_s": statistics.median(walls[1:]) if len(walls) > 1 else None,
            "fit_walls_s": walls}


def run_ours(ctx: Context) -> Dict[str, Any]:
    return _fits(ctx, reuse=True)


def run_anchor(ctx: Context) -> Dict[str, Any]:
    return _fits(ctx, reuse=False)


register(Workload(
    name="worker_reuse",
    description="10 sequential small 2-worker torch fits, warm local Ray",
    anchor="the same fits without engine.reuse_workers() (fresh workers each fit)",
    run_ours=run_ours,
    run_anchor=run_anchor,
    metrics=[Metric("wall_s", "s", Target("ratio_max", 0.5), "wall of the 10 fit() calls"),
             Metric("later_fit_median_s", "s", None, "median wall of fits 2..10")],
    ray_mode="warm",
    setup=_setup,
    sizes=sizes,
    rep_timeout_s=600.0,
    notes=["Ours' first fit starts its workers as every anchor fit does; the rest run on "
           "them, reset between fits."],
))
