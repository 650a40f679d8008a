"""Data ingest: a 10-million-row, 20-column float32 Parquet file into 2 workers.

Ours: ``DataParallelTrainer(datasets={"train": <path>})`` with 2 workers on the warm
local Ray; each worker iterates its shard (``streaming_split(2, equal=True)``) once with
``get_dataset_shard("train").iter_batches(batch_format="numpy", batch_size=BATCH)``.
Anchor: one process, ``pyarrow.parquet.ParquetFile(path).iter_batches(BATCH)`` over the
same file, each batch turned into numpy column arrays (the same thing the workers get).

The metric is rows/s of the ingest itself: ours from the moment the workers ask for
their first batch (which starts the dataset's execution: listing, reading, splitting)
to the moment the slower of the two has its last batch; the anchor from opening the
file to its last batch. ``fit_rows_per_s`` (rows / wall of the whole ``fit()``, worker
start-up included) is shown beside it. The file is generated once into
``$BENCH_CACHE_DIR`` (default ``/tmp/trainyard_bench_cache``); ``--quick`` uses 1M rows.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict

from bench.core import Context, Metric, Target, Workload, register

NUM_WORKERS = 2
COLUMNS = 20
BATCH_SIZE = 16_384
ROW_GROUP_ROWS = 262_144


def _rows(quick: bool) -> int:
    return 1_000_000 if quick else 10_000_000


def cache_dir() -> Path:
    return Path(os.environ.get("BENCH_CACHE_DIR") or "/tmp/trainyard_bench_cache")


def dataset_path(rows: int) -> Path:
    """The Parquet file of ``rows`` × 20 float32 columns, generated on first use."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = cache_dir() / f"ingest_{rows}x{COLUMNS}_f32.parquet"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    rng = np.random.default_rng(0)
    schema = pa.schema([(f"c{i}", pa.float32()) for i in range(COLUMNS)])
    t0 = time.perf_counter()
    with pq.ParquetWriter(tmp, schema, compression="snappy", use_dictionary=False) as writer:
        for start in range(0, rows, ROW_GROUP_ROWS):
            n = min(ROW_GROUP_ROWS, rows - start)
            block = rng.random((n, COLUMNS), dtype=np.float32)
            writer.write_table(pa.Table.from_arrays(
                [pa.array(block[:, i]) for i in range(COLUMNS)], schema=schema))
    os.replace(tmp, path)
    print(f"# generated {path} ({path.stat().st_size / 2**20:.0f} MB) in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    return path


# --- ours ------------------------------------------------------------------------------
def ingest_train_func(config: Dict[str, Any]) -> None:
    """Iterate this worker's shard once as numpy batches; report rows and timings."""
    import engine

    shard = engine.get_dataset_shard("train")
    rows = 0
    t_start = time.time()
    t_first = None
    for batch in shard.iter_batches(batch_format="numpy", batch_size=config["batch_size"]):
        if t_first is None:
            t_first = time.time()
        rows += len(batch["c0"])
    engine.report({"rows": rows, "t_start": t_start, "t_end": time.time(),
                   "t_first": t_first or time.time()})


def run_ours(ctx: Context, path: Path = None, num_workers: int = NUM_WORKERS
             ) -> Dict[str, Any]:
    from engine import RunConfig, ScalingConfig
    from engine.callbacks import Callback
    from engine.trainer import DataParallelTrainer

    path = path or dataset_path(_rows(ctx.quick))

    class Ranks(Callback):
        all_metrics = None

        def on_report(self, metrics, all_metrics):
            Ranks.all_metrics = all_metrics

    trainer = DataParallelTrainer(
        ingest_train_func, train_loop_config={"batch_size": BATCH_SIZE},
        scaling_config=ScalingConfig(num_workers=num_workers),
        run_config=RunConfig(storage_path=str(ctx.workdir), callbacks=[Ranks()]),
        datasets={"train": str(path)})
    t0 = time.perf_counter()
    trainer.fit()
    fit_s = time.perf_counter() - t0
    ranks = Ranks.all_metrics
    rows = sum(r["rows"] for r in ranks)
    ingest_s = max(r["t_end"] for r in ranks) - min(r["t_start"] for r in ranks)
    first_batch_s = max(r["t_first"] for r in ranks) - min(r["t_start"] for r in ranks)
    return {"rows_per_s": rows / ingest_s, "fit_rows_per_s": rows / fit_s, "rows": rows,
            "ingest_s": ingest_s, "fit_s": fit_s, "first_batch_s": first_batch_s,
            "rows_per_rank": [r["rows"] for r in ranks]}


# --- anchor ----------------------------------------------------------------------------
def run_anchor(ctx: Context, path: Path = None) -> Dict[str, Any]:
    import pyarrow.parquet as pq

    path = path or dataset_path(_rows(ctx.quick))
    t0 = time.perf_counter()
    rows = 0
    pf = pq.ParquetFile(path)
    for rb in pf.iter_batches(batch_size=BATCH_SIZE):
        cols = {name: rb.column(i).to_numpy() for i, name in enumerate(rb.schema.names)}
        rows += len(cols["c0"])
    ingest_s = time.perf_counter() - t0
    # Nothing to start up: the whole wall is the ingest.
    return {"rows_per_s": rows / ingest_s, "fit_rows_per_s": rows / ingest_s, "rows": rows,
            "ingest_s": ingest_s}


def setup_rows(rows: int) -> None:
    import ray.data  # noqa: F401  (driver-side imports outside the timed repetitions)

    import engine.trainer  # noqa: F401

    dataset_path(rows)


def sizes_of(rows: int) -> Dict[str, Any]:
    return {"rows": rows, "columns": COLUMNS, "dtype": "float32", "batch_size": BATCH_SIZE,
            "row_group_rows": ROW_GROUP_ROWS, "num_workers": NUM_WORKERS,
            "file": str(dataset_path(rows))}


WORKLOAD = register(Workload(
    name="ingest",
    description=f"Parquet 10M rows x {COLUMNS} float32 (quick: 1M) into {NUM_WORKERS} workers "
                f"as numpy batches of {BATCH_SIZE}",
    anchor="single-process pyarrow.parquet ParquetFile.iter_batches of the same file",
    run_ours=run_ours,
    run_anchor=run_anchor,
    metrics=[
        Metric("rows_per_s", "rows/s", Target("ratio_min", 0.5),
               "ingest: first batch request → last batch (ours: slower rank)"),
        Metric("fit_rows_per_s", "rows/s", None,
               "ours: rows / wall of fit() (worker start-up included); anchor: as rows_per_s"),
    ],
    ray_mode="warm",
    setup=lambda quick: setup_rows(_rows(quick)),
    sizes=lambda quick: sizes_of(_rows(quick)),
    rep_timeout_s=900.0,
    notes=["The Parquet file is generated once into $BENCH_CACHE_DIR (default "
           "/tmp/trainyard_bench_cache) and reused.",
           "Ours hands the trainer the path (datasets={'train': path}): the engine reads "
           "it with ray.data.read_parquet and splits it with streaming_split(2, "
           "equal=True)."],
))
