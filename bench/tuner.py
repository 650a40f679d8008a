"""50 trials × 10 reports of a trivial function on 2 CPUs, and the cost of a trial start.

Each side runs in a fresh process with its own local Ray of 2 logical CPUs (so both get
2 concurrent 1-CPU trials); the wall of ``Tuner.fit()`` is measured inside that process,
after Ray started. Ours: ``engine.tune.Tuner``; anchor: ``ray.tune.Tuner``, each with its
defaults (ours reuses the worker processes of finished function trials; Ray Tune 2.60
does not by default). ``wall_no_reuse_s`` is ours with ``reuse_actors=False`` against
the same anchor run.

Trial start (``trial_start_<n>w_s``): wall per trial of 5 trials run one at a time, each
reporting once, without actor reuse: a placement group of n 1-CPU bundles plus the
worker start. Ours starts n workers (a ``DataParallelTrainer`` with ``num_workers=n``);
the anchor is a Ray Tune function trial with ``PlacementGroupFactory([{"CPU": 1}] * n)``
(one actor in an n-bundle placement group: Ray Tune starts one process per trial).

Run ``python -m bench.tuner --child ours|anchor --params '{"workdir": DIR, "quick": true}'
--result OUT_JSON`` for one side (``bench._child``).
"""

from __future__ import annotations

import functools
import time
from typing import Any, Dict

from bench._child import child_main, run_child, with_own_ray
from bench.core import Context, Metric, Target, Workload, register

NUM_CPUS = 2


def sizes(quick: bool) -> Dict[str, int]:
    return {"trials": 10 if quick else 50, "reports": 10, "start_trials": 3 if quick else 5,
            "ray_num_cpus": NUM_CPUS}


# --- the trainables ------------------------------------------------------------------
def ours_trivial(config: Dict[str, Any]) -> None:
    import engine

    for i in range(config["reports"]):
        engine.report({"i": i, "x": config["x"]})


def anchor_trivial(config: Dict[str, Any]) -> None:
    from ray import tune

    for i in range(config["reports"]):
        tune.report({"i": i, "x": config["x"]})


def ours_once(config: Dict[str, Any]) -> None:
    import engine

    engine.report({"x": config["x"]})


def anchor_once(config: Dict[str, Any]) -> None:
    from ray import tune

    tune.report({"x": config["x"]})


# --- one side, in a fresh process ------------------------------------------------------
def _ours(workdir: str, s: Dict[str, int]) -> Dict[str, Any]:
    from engine import RunConfig, ScalingConfig
    from engine.trainer import DataParallelTrainer
    from engine.tune import TuneConfig, Tuner, grid_search, uniform

    def fit(reuse: Any, name: str) -> float:
        tuner = Tuner(ours_trivial, param_space={"x": uniform(0, 1), "reports": s["reports"]},
                      tune_config=TuneConfig(num_samples=s["trials"], reuse_actors=reuse),
                      run_config=RunConfig(name=name, storage_path=workdir, verbose=0))
        t0 = time.perf_counter()
        grid = tuner.fit()
        wall = time.perf_counter() - t0
        assert len(grid) == s["trials"] and grid.num_errors == 0, grid.errors[:1]
        return wall

    out: Dict[str, Any] = {"wall_s": fit(None, "default"),
                           "wall_no_reuse_s": fit(False, "no_reuse")}
    for n in (1, 2):
        trainer = DataParallelTrainer(ours_once, scaling_config=ScalingConfig(num_workers=n))
        tuner = Tuner(trainer,
                      param_space={"train_loop_config": {
                          "x": grid_search(list(range(s["start_trials"])))}},
                      tune_config=TuneConfig(max_concurrent_trials=1, reuse_actors=False),
                      run_config=RunConfig(name=f"start_{n}", storage_path=workdir, verbose=0))
        t0 = time.perf_counter()
        grid = tuner.fit()
        assert grid.num_errors == 0, grid.errors[:1]
        out[f"trial_start_{n}w_s"] = (time.perf_counter() - t0) / s["start_trials"]
    return out


def _anchor(workdir: str, s: Dict[str, int]) -> Dict[str, Any]:
    from ray import tune

    tuner = tune.Tuner(anchor_trivial,
                       param_space={"x": tune.uniform(0, 1), "reports": s["reports"]},
                       tune_config=tune.TuneConfig(num_samples=s["trials"]),
                       run_config=tune.RunConfig(name="default", storage_path=workdir,
                                                 verbose=0))
    t0 = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - t0
    assert len(grid) == s["trials"] and not grid.errors, grid.errors[:1]
    out: Dict[str, Any] = {"wall_s": wall, "wall_no_reuse_s": wall}
    for n in (1, 2):
        trainable = tune.with_resources(anchor_once,
                                        tune.PlacementGroupFactory([{"CPU": 1}] * n))
        tuner = tune.Tuner(trainable,
                           param_space={"x": tune.grid_search(list(range(s["start_trials"])))},
                           tune_config=tune.TuneConfig(max_concurrent_trials=1,
                                                       reuse_actors=False),
                           run_config=tune.RunConfig(name=f"start_{n}", storage_path=workdir,
                                                     verbose=0))
        t0 = time.perf_counter()
        grid = tuner.fit()
        assert not grid.errors, grid.errors[:1]
        out[f"trial_start_{n}w_s"] = (time.perf_counter() - t0) / s["start_trials"]
    return out


def _child(side: str, workdir: str, quick: bool) -> Dict[str, Any]:
    run = _ours if side == "ours" else _anchor
    return with_own_ray(NUM_CPUS, lambda: run(workdir, sizes(quick)))


# --- the workload ----------------------------------------------------------------------
def _run(ctx: Context) -> Dict[str, Any]:
    params = {"workdir": str(ctx.workdir / "runs"), "quick": ctx.quick}
    process_wall, out = run_child(ctx, "bench.tuner", ctx.side, params,
                                  log_name=f"{ctx.side}_tuner")
    out["process_wall_s"] = process_wall
    return out


register(Workload(
    name="tuner",
    description="Tuner.fit() of 50 trials × 10 reports of a trivial function, 2 CPUs "
                "(fresh process, own Ray)",
    anchor="Ray Tune Tuner (ray.tune, defaults)",
    run_ours=_run,
    run_anchor=_run,
    metrics=[
        Metric("wall_s", "s", Target("ratio_max", 0.5),
               "wall of Tuner.fit(), each side with its defaults"),
        Metric("wall_no_reuse_s", "s", None,
               "ours with reuse_actors=False (the anchor's default) vs the same anchor run"),
        Metric("trial_start_1w_s", "s", None,
               "wall per trial, 1-worker trials one at a time, no actor reuse"),
        Metric("trial_start_2w_s", "s", None,
               "wall per trial, 2-bundle trials one at a time (ours: 2 workers; "
               "anchor: 1 actor in a 2-bundle placement group)"),
    ],
    ray_mode="none",
    sizes=sizes,
    rep_timeout_s=900.0,
    notes=["Both sides run in a fresh process with ray.init(num_cpus=2); the wall of "
           "fit() is measured inside it, after Ray started."],
))


if __name__ == "__main__":
    child_main({side: functools.partial(_child, side) for side in ("ours", "anchor")})
