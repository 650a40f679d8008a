"""`fit()` of an empty ``train_func`` with 2 workers on a warm local Ray.

Ours: ``engine.torch.TorchTrainer``; anchor: ``ray.train.torch.TorchTrainer`` (Ray Train
V2, the default in Ray 2.60). Both set up a gloo process group on 2 CPU workers, run the
same empty function, and tear the group down; the wall of ``fit()`` is measured in the
runner process, which holds the one warm Ray both use.
"""

from __future__ import annotations

import time
from typing import Any, Dict

from bench.core import Context, Metric, Target, Workload, register

NUM_WORKERS = 2


def empty_train_func() -> None:
    """The whole job: nothing."""


def _setup(quick: bool) -> None:
    # Driver-side imports of both frameworks happen before any timed repetition.
    import engine.torch  # noqa: F401
    import ray.train.torch  # noqa: F401


def run_ours(ctx: Context) -> Dict[str, Any]:
    from engine import RunConfig, ScalingConfig
    from engine.torch import TorchTrainer

    trainer = TorchTrainer(empty_train_func,
                           scaling_config=ScalingConfig(num_workers=NUM_WORKERS),
                           run_config=RunConfig(storage_path=str(ctx.workdir)))
    t0 = time.perf_counter()
    trainer.fit()
    return {"wall_s": time.perf_counter() - t0}


def run_anchor(ctx: Context) -> Dict[str, Any]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    trainer = TorchTrainer(empty_train_func,
                           scaling_config=ScalingConfig(num_workers=NUM_WORKERS),
                           run_config=RunConfig(storage_path=str(ctx.workdir)))
    t0 = time.perf_counter()
    trainer.fit()
    return {"wall_s": time.perf_counter() - t0}


register(Workload(
    name="empty_fit",
    description="fit() of an empty train_func, 2 workers, warm local Ray",
    anchor="Ray Train TorchTrainer (ray.train.torch, V2)",
    run_ours=run_ours,
    run_anchor=run_anchor,
    metrics=[Metric("wall_s", "s", Target("ratio_max", 0.25), "wall of fit()")],
    ray_mode="warm",
    setup=_setup,
    sizes=lambda quick: {"num_workers": NUM_WORKERS},
    rep_timeout_s=300.0,
))
