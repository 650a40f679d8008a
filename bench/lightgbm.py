"""LightGBM on the XGBoost row's data (500k × 28 synthetic binary), 50 rounds, 2 workers.

Every side is a fresh ``python -m bench.lightgbm --child <side> ...`` process (like a
user's script; ``bench._child``), so ``whole_wall_s`` is process start to exit, Ray
start and shutdown included.

- ours: ``engine.lightgbm.LightGBMTrainer`` (built-in loop, ``tree_learner="data"``)
  on 2 workers, datasets given as Parquet paths, a report every round and the final
  checkpoint.
- anchor: one process, ``lightgbm.train(num_threads=2)`` on the same files.

``in_training_s`` is the same span on both sides, taken by one callback (rank 0): from
the first round's start (the Datasets are constructed) to the end of the last round,
after the report callback (the final report with its checkpoint returned). Train and
validation (50k rows) are eval sets on both sides. ``--quick``: 100k rows, 20 rounds.
"""

from __future__ import annotations

import time
from typing import Any, Dict

from bench._child import child_main, write_json
from bench.core import Metric, Target, Workload, register
from bench.xgboost import NUM_WORKERS, data_paths, run_marks, run_side, side_roles, sizes

PARAMS = {"objective": "binary", "metric": "binary_logloss", "num_leaves": 63,
          "max_depth": 6, "learning_rate": 0.1, "verbose": -1}


class Stamp:
    """Rank 0 writes when the first round started and when the last one (and the
    report callback, whose order is 20) ended."""

    before_iteration = True

    def __init__(self, out: str) -> None:
        self.out = out
        self.order = 5
        self.start = None

    def __call__(self, env: Any) -> None:
        if self.start is None:
            self.start = time.time()
        return None


class StampEnd:
    def __init__(self, start: Stamp) -> None:
        self.start = start
        self.order = 25  # after engine.lightgbm.ReportCallback

    def __call__(self, env: Any) -> None:
        if env.iteration == env.end_iteration - 1 and _rank() == 0:
            write_json(self.start.out, {"start": self.start.start, "end": time.time()})


def _rank() -> int:
    try:
        from engine.session import get_context

        return get_context().get_world_rank()
    except RuntimeError:  # outside a trainer: the single process
        return 0


def _stamps(out: str) -> list:
    start = Stamp(out)
    return [start, StampEnd(start)]


def side_ours(train: str, valid: str, rounds: int, stamp: str, storage: str) -> Dict[str, Any]:
    # As bench.xgboost's: Ray starts in a thread while the script imports.
    from engine.runtime import ensure_ray

    ensure_ray(background=True)
    from engine import RunConfig, ScalingConfig
    from engine.lightgbm import LightGBMTrainer

    imported = time.time()
    result = LightGBMTrainer(
        datasets={"train": train, "validation": valid}, label_column="label",
        params=PARAMS, num_boost_round=rounds, callbacks=_stamps(stamp),
        scaling_config=ScalingConfig(num_workers=NUM_WORKERS),
        run_config=RunConfig(storage_path=storage, verbose=0)).fit()
    assert result.metrics["training_iteration"] == rounds, result.metrics
    return {"validation_logloss": result.metrics["validation-binary_logloss"],
            "marks": run_marks(result.path, imported)}


def side_single(train: str, valid: str, rounds: int, stamp: str, storage: str
                ) -> Dict[str, Any]:
    import lightgbm
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    frames = [pq.read_table(p).to_pandas() for p in (train, valid)]
    dtrain = lightgbm.Dataset(frames[0].drop(columns=["label"]), label=frames[0]["label"])
    dvalid = lightgbm.Dataset(frames[1].drop(columns=["label"]), label=frames[1]["label"],
                              reference=dtrain)
    load_s = time.perf_counter() - t0
    log: Dict[str, Any] = {}
    lightgbm.train(dict(PARAMS, num_threads=NUM_WORKERS), dtrain, num_boost_round=rounds,
                   valid_sets=[dtrain, dvalid], valid_names=["train", "validation"],
                   callbacks=[*_stamps(stamp), lightgbm.record_evaluation(log)])
    return {"validation_logloss": log["validation"]["binary_logloss"][-1],
            "read_s": load_s}


SIDES = {"ours": side_ours, "single": side_single}


WORKLOAD = register(Workload(
    name="lightgbm",
    description="LightGBM 500k×28 binary, 50 rounds, 63 leaves: 2 workers vs 1 process",
    anchor="lightgbm.train(num_threads=2) in one process",
    run_ours=lambda ctx: run_side(ctx, "ours", module="bench.lightgbm"),
    run_anchor=lambda ctx: run_side(ctx, "single", module="bench.lightgbm"),
    metrics=[
        Metric("in_training_s", "s", Target("ratio_max", 1.3),
               "first round's start → final report returned (rank 0)"),
        Metric("whole_wall_s", "s", None, "process start to exit"),
    ],
    ray_mode="none", setup=lambda quick: data_paths(quick), sizes=lambda q: dict(
        sizes(q), params=PARAMS),
    rep_timeout_s=900.0,
    notes=["Each side is a fresh process with its own Ray (ray_mode none).",
           "LightGBM constructs Datasets lazily, inside lightgbm.train: the span starts at "
           "the first round on both sides."],
))


if __name__ == "__main__":
    child_main(side_roles(SIDES))
