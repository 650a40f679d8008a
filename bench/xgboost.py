"""XGBoost, 500k × 28 synthetic binary rows, 50 rounds, ``hist``, depth 6, 2 workers.

Every side is a fresh ``python -m bench.xgboost --child <side> ...`` process (like a
user's script; ``bench._child``), so ``whole_wall_s`` is process start to exit, Ray
start and shutdown included.

- ours: ``engine.xgboost.XGBoostTrainer`` (built-in loop) on 2 workers, datasets given
  as Parquet paths, a report every round and the final checkpoint.
- anchor ``xgboost``: one process, ``xgboost.train(nthread=2)`` on the same files.
- anchor ``xgboost_ray_train``: Ray Train's ``ray.train.xgboost.XGBoostTrainer`` with a
  training function and its ``RayTrainReportCallback`` (a report every round, the final
  checkpoint), 2 workers.

``in_training_s`` is the same span on every side, taken by one ``TrainingCallback``
(rank 0): from ``before_training`` (the matrices are built, in the workers) to
``after_training`` run after the report callback's, i.e. once the final report with
its checkpoint returned. Train and validation (50k rows) are eval sets everywhere.
The data is generated once into ``$BENCH_CACHE_DIR`` (default
``/tmp/trainyard_bench_cache``); ``--quick`` uses 100k rows and 20 rounds.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from bench._child import child_main, read_json, run_child, write_json
from bench.core import Context, Metric, Target, Workload, register

NUM_WORKERS = 2
FEATURES = 28
PARAMS = {"objective": "binary:logistic", "eval_metric": "logloss", "tree_method": "hist",
          "max_depth": 6, "eta": 0.1}


def sizes(quick: bool, train_rows: Optional[int] = None) -> Dict[str, Any]:
    """The job's sizes; ``train_rows`` scales it (``bench.scaling``: 5M, 20M rows, a
    validation set of a tenth of that, the same rounds)."""
    if train_rows is None:
        train_rows, valid_rows = (100_000, 10_000) if quick else (500_000, 50_000)
    else:
        valid_rows = train_rows // 10
    return {"train_rows": train_rows, "valid_rows": valid_rows, "features": FEATURES,
            "rounds": 20 if quick else 50, "workers": NUM_WORKERS,
            "params": PARAMS}


# --- data ------------------------------------------------------------------------------
def cache_dir() -> Path:
    return Path(os.environ.get("BENCH_CACHE_DIR") or "/tmp/trainyard_bench_cache")


# Up to this many rows the data is drawn in one piece (the 500k row's files, as they
# always were); larger sets are drawn and written a million rows at a time.
ONE_PIECE_ROWS = 2_000_000
CHUNK_ROWS = 1_000_000


def data_paths(quick: bool, train_rows: Optional[int] = None) -> Tuple[Path, Path]:
    """Train and validation Parquet files (28 float32 features + ``label``), HIGGS-like:
    a label from a noisy nonlinear function of the features. Generated on first use."""
    s = sizes(quick, train_rows)
    base = cache_dir() / f"gbdt_{s['train_rows']}x{FEATURES}"
    paths = (base.with_name(base.name + "_train.parquet"),
             base.with_name(base.name + "_valid.parquet"))
    if all(p.exists() for p in paths):
        return paths
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    base.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    n = s["train_rows"] + s["valid_rows"]
    if n > ONE_PIECE_ROWS:
        _write_in_chunks(paths, s["train_rows"], n, rng)
        return paths
    x = rng.standard_normal((n, FEATURES), dtype=np.float32)
    w = rng.standard_normal(FEATURES).astype(np.float32)
    y = _label(x, w, rng)
    for path, rows in zip(paths, (slice(0, s["train_rows"]), slice(s["train_rows"], n))):
        cols = {f"f{i}": x[rows, i] for i in range(FEATURES)}
        cols["label"] = y[rows]
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        pq.write_table(pa.table(cols), tmp, row_group_size=65_536)
        os.replace(tmp, path)
    return paths


def _label(x: Any, w: Any, rng: Any) -> Any:
    import numpy as np

    logit = x @ w / 3 + np.sin(x[:, 0] * x[:, 1]) + 0.5 * x[:, 2] * x[:, 3]
    return (logit + rng.logistic(size=len(x)) > 0).astype(np.int32)


def _write_in_chunks(paths: Tuple[Path, Path], train_rows: int, n: int, rng: Any) -> None:
    """The same distribution, a million rows at a time (20M rows would need 2.2 GB of
    features at once); each file is renamed into place only when complete."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    w = rng.standard_normal(FEATURES).astype(np.float32)
    schema = pa.schema([(f"f{i}", pa.float32()) for i in range(FEATURES)]
                       + [("label", pa.int32())])
    tmps = [p.with_name(p.name + f".{os.getpid()}.tmp") for p in paths]
    writers = [pq.ParquetWriter(t, schema) for t in tmps]
    try:
        for start in range(0, n, CHUNK_ROWS):
            stop = min(start + CHUNK_ROWS, n)
            x = rng.standard_normal((stop - start, FEATURES), dtype=np.float32)
            y = _label(x, w, rng)
            cut = min(max(train_rows - start, 0), stop - start)  # rows that are train's
            for writer, rows in ((writers[0], slice(0, cut)),
                                 (writers[1], slice(cut, stop - start))):
                if rows.stop > rows.start:
                    arrays = [pa.array(x[rows, i]) for i in range(FEATURES)]
                    writer.write_table(pa.Table.from_arrays(arrays + [pa.array(y[rows])],
                                                            schema=schema),
                                       row_group_size=65_536)
    finally:
        for writer in writers:
            writer.close()
    for tmp, path in zip(tmps, paths):
        os.replace(tmp, path)
    print(f"# generated {paths[0].name} and {paths[1].name} ({n:,} rows) in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)


# --- the span every side measures ---------------------------------------------------------
def _stamp_callback(out: str) -> Any:
    import xgboost

    class Stamp(xgboost.callback.TrainingCallback):
        """Rank 0 writes when training started and when it ended, to ``out``."""

        def before_training(self, model):
            self.start = time.time()
            return model

        def after_training(self, model):
            if xgboost.collective.get_rank() == 0:
                write_json(out, {"start": self.start, "end": time.time()})
            return model

    return Stamp()


class _StampMadeOnTheWorker:
    """How ours' driver passes the stamp: a placeholder that becomes
    ``_stamp_callback(out)`` when a worker unpickles it. The engine's driver imports no
    XGBoost for a fit (rank 0 runs the tracker); a ``TrainingCallback`` subclass built in
    the driver would import it there for the measurement alone (about 1.5 CPU-seconds
    beside Ray's start and the workers'), which a script that passes no callback does not
    pay. The Ray Train side builds its stamp in its workers too."""

    def __init__(self, out: str) -> None:
        self.out = out

    def __reduce__(self) -> Tuple[Callable[[str], Any], Tuple[str]]:
        return _stamp_callback, (self.out,)


def _span(path: Path) -> float:
    stamps = read_json(path)
    return stamps["end"] - stamps["start"]


# --- the sides, each in its own process ---------------------------------------------------
def side_ours(train: str, valid: str, rounds: int, stamp: str, storage: str) -> Dict[str, Any]:
    # The script's first lines, as docs/index.md recommends: Ray's local start runs in a
    # thread while the script imports (fit() waits for it).
    from engine.runtime import ensure_ray

    ensure_ray(background=True)
    from engine import RunConfig, ScalingConfig
    from engine.xgboost import XGBoostTrainer

    imported = time.time()
    result = XGBoostTrainer(
        datasets={"train": train, "validation": valid}, label_column="label",
        params=PARAMS, num_boost_round=rounds, callbacks=[_StampMadeOnTheWorker(stamp)],
        scaling_config=ScalingConfig(num_workers=NUM_WORKERS),
        run_config=RunConfig(storage_path=storage, verbose=0)).fit()
    assert result.metrics["training_iteration"] == rounds, result.metrics
    return {"validation_logloss": result.metrics["validation-logloss"],
            "marks": run_marks(result.path, imported),
            "driver_imported_xgboost": "xgboost" in sys.modules}


# --- where ours' whole process goes -------------------------------------------------------
def run_marks(run_path: str, imported: float) -> List[Tuple[str, str, float]]:
    """The child's own marks (imports done, ``fit()`` returned) and the engine's timeline
    of the run (driver and rank 0, from the run record), as ``(who, step, unix time)``."""
    import json

    fit_returned = time.time()
    with open(os.path.join(run_path, "run_state.json")) as f:
        timeline = json.load(f).get("timeline") or {}
    out = [("child", "imports", imported), ("child", "fit_returned", fit_returned)]
    for who in ("driver", "rank0"):
        out += [(who, name, t) for name, t in timeline.get(who) or []]
    return out


def breakdown(marks: List[Any], start: Optional[float], end: Optional[float]
              ) -> Dict[str, float]:
    """Seconds of each step of a process, in order: every mark (child, driver, rank 0;
    all on this machine's clock) ends the step named after it, which began at the
    previous mark (the first at the process's start); ``exit`` runs from the last
    mark to the process's end."""
    if not marks or start is None:
        return {}
    out: Dict[str, float] = {}
    last = start
    for who, name, t in sorted(marks, key=lambda m: m[2]):
        key = name if who in ("child", "driver") else f"{who}:{name}"
        out[key] = round(out.get(key, 0.0) + t - last, 3)
        last = t
    if end is not None:
        out["exit"] = round(end - last, 3)
    return out


def side_single(train: str, valid: str, rounds: int, stamp: str, storage: str
                ) -> Dict[str, Any]:
    import pyarrow.parquet as pq
    import xgboost

    t0 = time.perf_counter()
    matrices = []
    for path in (train, valid):
        df = pq.read_table(path).to_pandas()
        matrices.append(xgboost.DMatrix(df.drop(columns=["label"]), label=df["label"]))
    load_s = time.perf_counter() - t0
    log: Dict[str, Any] = {}
    xgboost.train(dict(PARAMS, nthread=NUM_WORKERS), matrices[0], num_boost_round=rounds,
                  evals=[(matrices[0], "train"), (matrices[1], "validation")],
                  evals_result=log, verbose_eval=False, callbacks=[_stamp_callback(stamp)])
    return {"validation_logloss": log["validation"]["logloss"][-1], "read_and_dmatrix_s": load_s}


def _ray_train_fn(config: Dict[str, Any]) -> None:
    import ray.train
    import xgboost
    from ray.train.xgboost import RayTrainReportCallback

    frames = {name: ray.train.get_dataset_shard(name).materialize().to_pandas()
              for name in ("train", "validation")}
    mats = {name: xgboost.DMatrix(df.drop(columns=["label"]), label=df["label"])
            for name, df in frames.items()}
    xgboost.train(dict(PARAMS, nthread=1), mats["train"], num_boost_round=config["rounds"],
                  evals=[(mats["train"], "train"), (mats["validation"], "validation")],
                  verbose_eval=False,
                  callbacks=[RayTrainReportCallback(), _stamp_callback(config["stamp"])])


def side_ray_train(train: str, valid: str, rounds: int, stamp: str, storage: str
                   ) -> Dict[str, Any]:
    import ray
    import ray.train
    from ray.train.xgboost import XGBoostTrainer

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    result = XGBoostTrainer(
        _ray_train_fn, train_loop_config={"rounds": rounds, "stamp": stamp},
        datasets={"train": ray.data.read_parquet(train),
                  "validation": ray.data.read_parquet(valid)},
        scaling_config=ray.train.ScalingConfig(num_workers=NUM_WORKERS),
        run_config=ray.train.RunConfig(storage_path=storage)).fit()
    return {"validation_logloss": result.metrics["validation-logloss"]}


SIDES = {"ours": side_ours, "single": side_single, "ray_train": side_ray_train}


def _timed_side(side: Callable[..., Dict[str, Any]], **params: Any) -> Dict[str, Any]:
    """One side, in this process: its result plus the wall of the side call."""
    t0 = time.perf_counter()
    out = side(**params)
    out["side_call_s"] = time.perf_counter() - t0
    return out


def side_roles(sides: Dict[str, Callable[..., Dict[str, Any]]]) -> Dict[str, Callable]:
    """The ``bench._child`` roles of a module's sides (rank 0 writes ``stamp.json``)."""
    return {name: functools.partial(_timed_side, side) for name, side in sides.items()}


def run_side(ctx: Context, side: str, module: str = "bench.xgboost",
             train_rows: Optional[int] = None) -> Dict[str, Any]:
    """Run one side in a fresh process: the whole wall, the in-training span, extras."""
    train, valid = data_paths(ctx.quick, train_rows)
    stamp = ctx.workdir / "stamp.json"
    wall, out = run_child(ctx, module, side, {
        "train": str(train), "valid": str(valid),
        "rounds": sizes(ctx.quick, train_rows)["rounds"],
        "stamp": str(stamp), "storage": str(ctx.workdir / "runs")}, log_name=side)
    marks = out.pop("marks", None)
    if marks:
        out["breakdown_s"] = breakdown(marks, ctx.last_process_start_unix,
                                       ctx.last_process_end_unix)
    return {"whole_wall_s": wall, "in_training_s": _span(stamp), **out}


_NOTES = ["Each side is a fresh process with its own Ray (ray_mode none); the anchor's "
          "RSS is its process's.",
          "in_training_s: one TrainingCallback on rank 0, before_training → after the "
          "report callback's after_training (final report and checkpoint done)."]

WORKLOAD = register(Workload(
    name="xgboost",
    description="XGBoost 500k×28 binary, 50 rounds, hist, depth 6: 2 workers vs 1 process",
    anchor="xgboost.train(nthread=2) in one process",
    run_ours=lambda ctx: run_side(ctx, "ours"),
    run_anchor=lambda ctx: run_side(ctx, "single"),
    metrics=[
        Metric("in_training_s", "s", Target("ratio_max", 1.3),
               "matrices built → final report returned (rank 0)"),
        Metric("whole_wall_s", "s", None, "process start to exit"),
    ],
    ray_mode="none", setup=lambda quick: data_paths(quick), sizes=sizes,
    rep_timeout_s=900.0, notes=_NOTES,
))

register(Workload(
    name="xgboost_ray_train",
    description="The same job: trainyard's XGBoostTrainer vs Ray Train's, 2 workers each",
    anchor="ray.train.xgboost.XGBoostTrainer + RayTrainReportCallback",
    run_ours=lambda ctx: run_side(ctx, "ours"),
    run_anchor=lambda ctx: run_side(ctx, "ray_train"),
    metrics=[
        Metric("whole_wall_s", "s", Target("ratio_max", 1.0), "process start to exit"),
        Metric("in_training_s", "s", Target("ratio_max", 1.0),
               "matrices built → final report returned (rank 0)"),
    ],
    ray_mode="none", setup=lambda quick: data_paths(quick), sizes=sizes,
    rep_timeout_s=900.0, notes=_NOTES,
))


if __name__ == "__main__":
    child_main(side_roles(SIDES))
