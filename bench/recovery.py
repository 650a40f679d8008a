"""Recovery: a worker is SIGKILLed; how long until the restarted group's first report?

Both sides run the same loop: rank 1 SIGKILLs itself at the 5th report of the first
attempt (writing the time just before), the trainer restarts the group from the last
checkpoint (``max_failures=1``), and rank 0 writes the time at which it enters its first
report of the new attempt. Ours: ``engine.torch.TorchTrainer``; anchor: Ray Train's
``TorchTrainer``, measured the same way. The target is ours < 5 s.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any, Callable, Dict

from bench._child import read_json, write_json
from bench.core import Context, Metric, Target, Workload, register

NUM_WORKERS = 2
KILL_AT = 5


def make_loop(report: Callable, get_checkpoint: Callable, get_rank: Callable,
              from_dict: Callable) -> Callable:
    """The shared loop, parameterised by each framework's session functions."""

    def loop(config: Dict[str, Any]) -> None:
        restarted = get_checkpoint() is not None
        rank = get_rank()
        for i in range(KILL_AT + 3):
            if restarted and rank == 0 and i == 0:
                write_json(config["first_report"], time.time())
            if not restarted and rank == 1 and i == KILL_AT:
                write_json(config["killed"], time.time())
                os.kill(os.getpid(), signal.SIGKILL)
            report({"i": i}, checkpoint=from_dict(i) if i == 0 else None)
            time.sleep(0.05)
            if restarted and i >= 2:
                return

    return loop


def _ours_loop(config: Dict[str, Any]) -> None:
    import engine

    def ckpt(i: int):
        return engine.Checkpoint.from_dict({"i": i})

    make_loop(engine.report, engine.get_checkpoint,
              lambda: engine.get_context().get_world_rank(), ckpt)(config)


def _anchor_loop(config: Dict[str, Any]) -> None:
    import tempfile

    import ray.train

    def ckpt(i: int):
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "i.json"), "w") as fh:
            fh.write(json.dumps(i))
        return ray.train.Checkpoint.from_directory(d)

    make_loop(ray.train.report, ray.train.get_checkpoint,
              lambda: ray.train.get_context().get_world_rank(), ckpt)(config)


def _measure(ctx: Context, fit: Callable[[Dict[str, Any]], None]) -> Dict[str, Any]:
    config = {"killed": str(ctx.workdir / "killed.json"),
              "first_report": str(ctx.workdir / "first_report.json")}
    fit(config)
    return {"recovery_s": read_json(config["first_report"]) - read_json(config["killed"])}


def run_ours(ctx: Context) -> Dict[str, Any]:
    from engine import FailureConfig, RunConfig, ScalingConfig
    from engine.torch import TorchTrainer

    def fit(config: Dict[str, Any]) -> None:
        TorchTrainer(_ours_loop, train_loop_config=config,
                     scaling_config=ScalingConfig(num_workers=NUM_WORKERS),
                     run_config=RunConfig(storage_path=str(ctx.workdir / "store"), verbose=0,
                                          failure_config=FailureConfig(max_failures=1))).fit()

    return _measure(ctx, fit)


def run_anchor(ctx: Context) -> Dict[str, Any]:
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    def fit(config: Dict[str, Any]) -> None:
        TorchTrainer(_anchor_loop, train_loop_config=config,
                     scaling_config=ScalingConfig(num_workers=NUM_WORKERS),
                     run_config=RunConfig(storage_path=str(ctx.workdir / "store"),
                                          failure_config=FailureConfig(max_failures=1))).fit()

    return _measure(ctx, fit)


def _setup(quick: bool) -> None:
    import engine.torch  # noqa: F401
    import ray.train.torch  # noqa: F401


register(Workload(
    name="recovery",
    description="worker SIGKILL → first report() of the restarted group, warm local Ray",
    anchor="Ray Train TorchTrainer with FailureConfig(max_failures=1)",
    run_ours=run_ours,
    run_anchor=run_anchor,
    metrics=[Metric("recovery_s", "s", Target("abs_max", 5.0),
                    "time from the SIGKILL to rank 0 entering its first report of the "
                    "new group")],
    ray_mode="warm",
    setup=_setup,
    sizes=lambda quick: {"num_workers": NUM_WORKERS, "kill_at_report": KILL_AT},
    rep_timeout_s=300.0,
))
