"""PPO on CartPole to a mean episode return of 150: RLTrainer vs RLlib driven directly.

Each side runs in a fresh process with its own local Ray of 4 logical CPUs and RLlib
imported before the clock starts (a user building an RLlib config has it imported).
Timed: ours, ``RLTrainer(...).fit()`` (placement group, the engine worker that runs the
algorithm, its 2 env runners, a report and a checkpoint every iteration, teardown);
anchor, ``config.build_algo()`` + an ``algo.train()`` loop + ``algo.stop()`` in the
driver. Same config (RLlib's PPO defaults with lr 3e-4, 6 epochs, vf_loss_coeff 0.01,
seed 0), 2 env runners of 1 CPU each, the same stop (return ≥ 150 or 20 iterations).

Run ``python -m bench.rllib --child ours|anchor --params '{"workdir": DIR}' --result
OUT_JSON`` for one side (``bench._child``).
"""

from __future__ import annotations

import functools
import time
from typing import Any, Dict

from bench._child import child_main, run_child, with_own_ray
from bench.core import Context, Metric, Target, Workload, register

NUM_CPUS = 4
TARGET_RETURN = 150.0
MAX_ITERATIONS = 20
CONFIG = {"env": "CartPole-v1", "lr": 3e-4, "num_epochs": 6, "vf_loss_coeff": 0.01,
          "seed": 0}
ENV_RUNNERS = 2


def sizes(quick: bool) -> Dict[str, Any]:
    return {"target_return": TARGET_RETURN, "max_iterations": MAX_ITERATIONS,
            "env_runners": ENV_RUNNERS, "ray_num_cpus": NUM_CPUS}


def _ours(workdir: str) -> Dict[str, Any]:
    from engine import RunConfig, ScalingConfig
    from engine.rllib import RLTrainer

    trainer = RLTrainer(
        "PPO", config=CONFIG, scaling_config=ScalingConfig(num_workers=ENV_RUNNERS),
        stop={"env_runners/episode_return_mean": TARGET_RETURN,
              "training_iteration": MAX_ITERATIONS},
        run_config=RunConfig(storage_path=workdir, name="ppo", verbose=0),
    )
    t0 = time.perf_counter()
    result = trainer.fit()
    wall = time.perf_counter() - t0
    ret = result.metrics["env_runners"]["episode_return_mean"]
    assert ret >= TARGET_RETURN, f"stopped at return {ret}"
    return {"wall_to_150_s": wall, "iterations": result.metrics["training_iteration"],
            "final_return": ret, "engine_time_total_s": result.metrics["time_total_s"]}


def _anchor(workdir: str) -> Dict[str, Any]:
    from ray.rllib.algorithms.ppo import PPOConfig

    config = PPOConfig().update_from_dict(dict(CONFIG, num_env_runners=ENV_RUNNERS))
    t0 = time.perf_counter()
    algo = config.build_algo()
    t_built = time.perf_counter()
    ret = None
    try:
        for _ in range(MAX_ITERATIONS):
            ret = algo.train()["env_runners"].get("episode_return_mean")
            if ret is not None and ret >= TARGET_RETURN:
                break
        iterations = algo.iteration
    finally:
        algo.stop()
    wall = time.perf_counter() - t0
    assert ret is not None and ret >= TARGET_RETURN, f"stopped at return {ret}"
    import torch

    # The algorithm's learner runs in this process with torch's default thread count
    # (ours runs it in a 1-CPU Ray actor, where Ray sets OMP_NUM_THREADS=1).
    return {"wall_to_150_s": wall, "iterations": iterations, "final_return": ret,
            "build_s": t_built - t0, "driver_torch_threads": torch.get_num_threads()}


def _child(side: str, workdir: str) -> Dict[str, Any]:
    def run() -> Dict[str, Any]:
        import ray.rllib.algorithms.ppo  # noqa: F401  (both sides: imported before timing)

        return _ours(workdir) if side == "ours" else _anchor(workdir)

    return with_own_ray(NUM_CPUS, run)


def _run(ctx: Context) -> Dict[str, Any]:
    process_wall, out = run_child(ctx, "bench.rllib", ctx.side,
                                  {"workdir": str(ctx.workdir / "runs")},
                                  log_name=f"{ctx.side}_rllib")
    out["process_wall_s"] = process_wall
    return out


register(Workload(
    name="rllib",
    description="PPO on CartPole to a mean return of 150, 2 env runners "
                "(fresh process, own Ray of 4 CPUs)",
    anchor="RLlib driven directly (config.build_algo() + algo.train() loop)",
    run_ours=_run,
    run_anchor=_run,
    metrics=[
        Metric("wall_to_150_s", "s", Target("ratio_max", 1.2),
               "ours: RLTrainer.fit(); anchor: build_algo() + train() loop + stop()"),
        Metric("iterations", "", None, "training iterations to the stop"),
        Metric("process_wall_s", "s", None, "the whole child process, Ray start included"),
    ],
    ray_mode="none",
    sizes=sizes,
    rep_timeout_s=900.0,
    notes=["Both sides run in a fresh process with ray.init(num_cpus=4) and RLlib already "
           "imported; the wall is measured inside it. Ours checkpoints every iteration "
           "(RLTrainer's default); its worker process skips RLlib's TensorFlow import "
           "(torch algorithm), the env runners of both sides do not."],
))


if __name__ == "__main__":
    child_main({side: functools.partial(_child, side) for side in ("ours", "anchor")})
