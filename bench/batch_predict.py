"""Batch prediction: a Torch MLP scoring a 2-million-row Parquet file (quick: 200k).

Ours: ``BatchPredictor.from_checkpoint(ckpt, TorchPredictor, model=mlp).predict(path,
batch_size=BATCH, num_workers=2)`` on the warm local Ray (Ray Data ``read_parquet`` →
``map_batches`` on a pool of 2 actors, each loading the checkpoint once), the output
consumed on the driver with ``iter_batches`` (rows counted, predictions summed).
Anchor: one process reads the same file with ``pyarrow.parquet.ParquetFile.iter_batches``
in batches of the same size, stacks the columns, runs the same model from the same
checkpoint under ``torch.inference_mode`` and sums the predictions (torch's default
intra-op threads: every core).

The metric is rows/s over the whole call, ours including the actors' start-up and model
loading (``first_batch_s``, the wait for the first scored block, is kept beside it).
Both sides' prediction sums are recorded (they agree to float tolerance). The 20-column
float32 file is the ingest workload's generator (``$BENCH_CACHE_DIR``).
"""

from __future__ import annotations

import time
from typing import Any, Dict

from bench.core import Context, Metric, Target, Workload, register
from bench.ingest import COLUMNS, dataset_path

NUM_WORKERS = 2
BATCH_SIZE = 16_384
HIDDEN = 256
FEATURES = [f"c{i}" for i in range(COLUMNS)]


def _rows(quick: bool) -> int:
    return 200_000 if quick else 2_000_000


def build_mlp():
    import torch.nn as nn

    return nn.Sequential(nn.Linear(COLUMNS, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                         nn.ReLU(), nn.Linear(HIDDEN, 1))


def _checkpoint(ctx: Context):
    """The same seeded weights for both sides, saved as a TorchCheckpoint (model.pt)."""
    import torch

    from engine import Checkpoint
    from engine.torch import TorchCheckpoint

    torch.manual_seed(0)
    ckpt = TorchCheckpoint.from_model(build_mlp())
    return Checkpoint.from_directory(ckpt.to_directory(str(ctx.workdir / "checkpoint")))


def run_ours(ctx: Context) -> Dict[str, Any]:
    from engine.predict import BatchPredictor
    from engine.torch import TorchPredictor

    path = dataset_path(_rows(ctx.quick))
    ckpt = _checkpoint(ctx)
    t0 = time.perf_counter()
    predictor = BatchPredictor.from_checkpoint(ckpt, TorchPredictor, model=build_mlp())
    ds = predictor.predict(str(path), batch_size=BATCH_SIZE, num_workers=NUM_WORKERS,
                           feature_columns=FEATURES)
    rows, total, t_first = 0, 0.0, None
    for batch in ds.iter_batches(batch_format="numpy", batch_size=None):
        if t_first is None:
            t_first = time.perf_counter()
        rows += len(batch["predictions"])
        total += float(batch["predictions"].sum(dtype="float64"))
    wall = time.perf_counter() - t0
    t_first = t_first or time.perf_counter()
    return {"rows_per_s": rows / wall, "rows": rows, "wall_s": wall,
            "first_batch_s": t_first - t0, "prediction_sum": total}


def run_anchor(ctx: Context) -> Dict[str, Any]:
    import numpy as np
    import pyarrow.parquet as pq
    import torch

    from engine.torch import TorchCheckpoint

    path = dataset_path(_rows(ctx.quick))
    ckpt = _checkpoint(ctx)
    t0 = time.perf_counter()
    model = TorchCheckpoint.wrap(ckpt).get_model(build_mlp()).eval()
    rows, total = 0, 0.0
    for rb in pq.ParquetFile(path).iter_batches(batch_size=BATCH_SIZE, columns=FEATURES):
        x = np.column_stack([rb.column(i).to_numpy() for i in range(rb.num_columns)])
        with torch.inference_mode():
            pred = model(torch.from_numpy(x))[:, 0].numpy()
        rows += len(pred)
        total += float(pred.sum(dtype="float64"))
    wall = time.perf_counter() - t0
    return {"rows_per_s": rows / wall, "rows": rows, "wall_s": wall,
            "prediction_sum": total}


def _setup(quick: bool) -> None:
    import ray.data  # noqa: F401  (driver-side imports outside the timed repetitions)
    import torch  # noqa: F401

    import engine.predict  # noqa: F401
    import engine.torch  # noqa: F401

    dataset_path(_rows(quick))


register(Workload(
    name="batch_predict",
    description=f"Torch MLP ({COLUMNS}→{HIDDEN}→{HIDDEN}→1) scoring a 2M-row (quick: 200k) "
                f"Parquet file with {NUM_WORKERS} actors, batches of {BATCH_SIZE}",
    anchor="single process: pyarrow ParquetFile.iter_batches + the same model, same batches",
    run_ours=run_ours,
    run_anchor=run_anchor,
    metrics=[
        Metric("rows_per_s", "rows/s", Target("ratio_min", 0.5),
               "rows / whole wall (ours: actor start-up and model loading included)"),
    ],
    ray_mode="warm",
    setup=_setup,
    sizes=lambda quick: {"rows": _rows(quick), "columns": COLUMNS, "dtype": "float32",
                         "hidden": HIDDEN, "batch_size": BATCH_SIZE,
                         "num_workers": NUM_WORKERS,
                         "file": str(dataset_path(_rows(quick)))},
    rep_timeout_s=900.0,
    notes=["The Parquet file comes from bench.ingest.dataset_path ($BENCH_CACHE_DIR).",
           "Both sides load the same TorchCheckpoint (model.pt, weights_only=True)."],
))
