"""Handwritten digits (scikit-learn's 8×8 digits) with a small MLP, trained with DDP.

``python -m pipelines.digits`` trains it on a local embedded Ray with 2 workers and prints
the final metrics and where the checkpoint is (``make run``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import time
import uuid
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import numpy as np

logger = logging.getLogger(__name__)

FEATURES = 64
CLASSES = 10
#: What ``validate`` expects of the ingested data (scikit-learn's frame): 64 pixel
#: intensities in [0, 16], no nulls, a digit label; no other columns (they would become
#: model inputs).
DATA_SCHEMA = {
    "columns": {**{f"pixel_{r}_{c}": {"type": "float64", "nullable": False, "min": 0,
                                      "max": 16} for r in range(8) for c in range(8)},
                "target": {"type": "int", "nullable": False, "isin": list(range(CLASSES))}},
    "strict": True,
}


def load_digits_split(test_size: float = 0.2, seed: int = 0
                      ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Standardised train/validation arrays of scikit-learn's digits (ships with it).

    The split is kept on this machine in ``$TRAINYARD_DATA_CACHE`` (an ``.npz`` named by
    scikit-learn's version, ``test_size`` and ``seed``), so that a fresh training worker
    reads it with numpy instead of importing scikit-learn (about 1.3 CPU-seconds in each
    worker process). A cache that is missing, unreadable or unwritable only means the
    split is computed again.
    """
    path = _split_cache_path(test_size, seed)
    if path is not None:
        cached = _read_split(path)
        if cached is not None:
            return cached
    split = _compute_split(test_size, seed)
    if path is not None:
        _write_split(path, split)
    return split


_SPLIT_ARRAYS = ("X_train", "y_train", "X_val", "y_val")


def _split_cache_path(test_size: float, seed: int) -> Optional[str]:
    from engine import constants

    root = constants.get(constants.DATA_CACHE_ENV_VAR)
    if not root:
        return None
    try:  # the version from its metadata: importing scikit-learn is what the cache saves
        from importlib.metadata import version

        sklearn_version = version("scikit-learn")
    except Exception:  # noqa: BLE001 - not installed: computing the split says so
        return None
    name = f"digits_split_v1_sklearn{sklearn_version}_test{float(test_size)!r}_seed{seed}.npz"
    return os.path.join(os.path.expanduser(root), name)


def _read_split(path: str) -> Optional[Tuple[np.ndarray, ...]]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return tuple(npz[k] for k in _SPLIT_ARRAYS)  # type: ignore[return-value]
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - a damaged file is computed and written again
        logger.warning("Ignoring the unreadable digits split cache %s (%s: %s); computing "
                       "the split again.", path, type(exc).__name__, exc)
        return None


def _write_split(path: str, split: Tuple[np.ndarray, ...]) -> None:
    """Write to a temporary name, then rename: a reader (another worker on this machine)
    sees the whole file or none, and an interrupted write leaves no cache behind.
    (Not ``Storage.write_bytes_atomic``: a cache needs neither its retries with backoff,
    which would hold a worker up on a read-only directory, nor its fsyncs.)"""
    tmp = f"{path}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            np.savez(f, **dict(zip(_SPLIT_ARRAYS, split)))
        os.replace(tmp, path)
    except OSError as exc:
        logger.debug("Not caching the digits split at %s: %s", path, exc)
        with contextlib.suppress(OSError):
            os.remove(tmp)


def _compute_split(test_size: float, seed: int
                   ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    X_train, X_val, y_train, y_val = train_test_split(
        X, y.astype(np.int64), test_size=test_size, random_state=seed, stratify=y)
    return X_train, y_train, X_val, y_val


def build_model(hidden: int = 64):
    import torch.nn as nn

    return nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, CLASSES))


def weights_checksum(model) -> str:
    """A digest of the model's weights, equal on ranks that hold identical weights."""
    model = getattr(model, "module", model)
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def train_func(config: Dict[str, Any]) -> None:
    """The per-worker loop: DDP via prepare_model/prepare_data_loader, a checkpoint each
    epoch, resuming from ``get_checkpoint()``."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from engine.torch import accelerate, enable_reproducibility, prepare_data_loader

    if config.get("seed") is not None:
        enable_reproducibility(config["seed"])
    if config.get("amp"):
        accelerate(amp=True)
    X_train, y_train, X_val, y_val = load_digits_split()
    ids = torch.arange(len(X_train))
    train_ds = TensorDataset(torch.from_numpy(X_train), torch.from_numpy(y_train), ids)
    loader = prepare_data_loader(DataLoader(train_ds, batch_size=config.get("batch_size", 32),
                                            shuffle=True))

    def epoch_batches(epoch: int):
        set_epoch = getattr(loader, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(epoch)  # the same shuffling sequence after a resume
        return loader

    _fit(config, epoch_batches, torch.from_numpy(X_val), torch.from_numpy(y_val))


def digits_datasets(test_size: float = 0.2, seed: int = 0) -> Dict[str, Any]:
    """The same train/validation split as Ray Datasets of ``{"x", "y", "id"}`` rows, for
    ``train_func_ray_data`` (pass ``DataConfig(datasets_to_split=["train"])`` so every
    worker gets the whole validation set, as ``train_func`` has)."""
    import ray.data

    X_train, y_train, X_val, y_val = load_digits_split(test_size, seed)

    def rows(X: np.ndarray, y: np.ndarray):
        return [{"x": X[i], "y": int(y[i]), "id": i} for i in range(len(X))]

    return {"train": ray.data.from_items(rows(X_train, y_train)),
            "validation": ray.data.from_items(rows(X_val, y_val))}


def train_func_ray_data(config: Dict[str, Any]) -> None:
    """``train_func`` fed by Ray Data: this worker's shard of ``datasets["train"]`` through
    ``iter_torch_batches`` (locally shuffled each epoch), validation from
    ``datasets["validation"]``; model, optimizer, checkpoints and metrics as ``train_func``."""
    import torch

    import engine
    from engine.torch import accelerate, enable_reproducibility

    seed = config.get("seed")
    if seed is not None:
        enable_reproducibility(seed)
    if config.get("amp"):
        accelerate(amp=True)
    shard = engine.get_dataset_shard("train")
    dtypes = {"x": torch.float32, "y": torch.int64, "id": torch.int64}
    val = list(engine.get_dataset_shard("validation").iter_torch_batches(
        batch_size=None, dtypes=dtypes, device="cpu"))
    X_val = torch.cat([b["x"] for b in val])
    y_val = torch.cat([b["y"] for b in val])

    def epoch_batches(epoch: int):
        for b in shard.iter_torch_batches(
                batch_size=config.get("batch_size", 32), dtypes=dtypes,
                local_shuffle_buffer_size=config.get("shuffle_buffer", 512),
                local_shuffle_seed=None if seed is None else seed + epoch):
            yield b["x"], b["y"], b["id"]

    _fit(config, epoch_batches, X_val, y_val)


def _fit(config: Dict[str, Any], epoch_batches: Callable[[int], Iterable], X_val, y_val
         ) -> None:
    """The loop both train funcs share: build (or resume) the model, train one pass of
    ``epoch_batches(epoch)`` (``(x, y, ids)`` batches) per epoch, evaluate on the
    validation tensors, report metrics and a rank-0 checkpoint each epoch."""
    import torch

    import engine
    from engine.torch import backward, prepare_model, prepare_optimizer

    model = build_model(config.get("hidden", 64))
    optimizer_state = None
    start_epoch = 0
    checkpoint = engine.get_checkpoint()
    if checkpoint is not None:
        state = checkpoint.to_dict()
        model.load_state_dict(state["model_weights"])
        optimizer_state = state.get("optimizer")  # resuming must restore Adam's moments too
        start_epoch = state["epoch"] + 1
    model = prepare_model(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.get("lr", 3e-3))
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    optimizer = prepare_optimizer(optimizer)
    loss_fn = torch.nn.CrossEntropyLoss()
    Xv, yv = X_val, y_val
    rank = engine.get_context().get_world_rank()
    for epoch in range(start_epoch, config.get("epochs", 15)):
        model.train()
        seen, total_loss, batches = [], 0.0, 0
        for xb, yb, idx in epoch_batches(epoch):
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            backward(loss)
            optimizer.step()
            total_loss += loss.item()
            batches += 1
            seen.extend(idx.tolist())
        model.eval()
        with torch.no_grad():
            accuracy = (model(Xv).argmax(dim=1) == yv).float().mean().item()
        metrics: Dict[str, Any] = {"epoch": epoch, "loss": total_loss / max(batches, 1),
                                   "accuracy": accuracy,
                                   "weights_checksum": weights_checksum(model)}
        if config.get("report_seen_ids"):
            metrics["seen_ids"] = sorted(seen)
        ckpt = None
        if rank == 0:
            state_dict = getattr(model, "module", model).state_dict()
            ckpt = engine.Checkpoint.from_dict({"epoch": epoch, "model_weights": state_dict,
                                                "optimizer": optimizer.state_dict()})
        engine.report(metrics, checkpoint=ckpt)
        if config.get("epoch_delay_s"):  # pace epochs, e.g. so a test can act mid-run
            time.sleep(config["epoch_delay_s"])


# --- the pipeline: ingested tables in, a checkpoint with a model card out -----------------
# Digits is small (1.4k training rows): every worker reads the split's Parquet files and a
# DistributedSampler (prepare_data_loader) gives it its share, as in ``train_func`` — no
# Ray Data job per fit, which would cost more than the training. A pipeline over large
# data passes ``datasets=`` to its trainer instead and reads get_dataset_shard() (see
# pipelines/breast_cancer.py).
def train_func_files(config: Dict[str, Any], data: Dict[str, Any], label_column: str,
                     preprocessor: Any = None) -> None:
    """``train_func`` on the Parquet tables ``tasks.split`` wrote: ``data`` maps
    ``train``/``validation`` to ``(pyarrow filesystem, path)``; the features are every
    column but ``label_column``, transformed by the fitted ``preprocessor``."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from engine.torch import enable_reproducibility, prepare_data_loader

    if config.get("seed") is not None:
        enable_reproducibility(config["seed"])
    X, y = table_arrays(data["train"], label_column, preprocessor)
    X_val, y_val = table_arrays(data["validation"], label_column, preprocessor)
    train_ds = TensorDataset(X, y, torch.arange(len(X)))
    loader = prepare_data_loader(DataLoader(train_ds, batch_size=config.get("batch_size", 32),
                                            shuffle=True))

    def epoch_batches(epoch: int):
        set_epoch = getattr(loader, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(epoch)  # the same shuffling sequence after a resume
        return loader

    _fit(config, epoch_batches, X_val, y_val)


def read_table(source: Any) -> Any:
    """A pandas DataFrame of ``(filesystem, path)``: a Parquet file or directory (files
    starting with ``_`` or ``.`` skipped)."""
    import pyarrow.dataset as pds

    fs, path = source
    return pds.dataset(path, filesystem=fs, format="parquet").to_table().to_pandas()


def table_arrays(source: Any, label_column: str, preprocessor: Any = None):
    """``(features float32 (n, k), labels int64 (n,))`` tensors of a table."""
    import torch

    df = read_table(source)
    if label_column not in df.columns:
        raise KeyError(f"The table has no label column {label_column!r} (columns: "
                       f"{list(df.columns)}).")
    if preprocessor is not None:
        df = preprocessor.transform_batch(df)
    features = df.drop(columns=[label_column]).to_numpy(dtype=np.float32)
    return (torch.from_numpy(np.ascontiguousarray(features)),
            torch.from_numpy(np.array(df[label_column], dtype=np.int64)))


def make_trainer(config: Dict[str, Any], datasets: Dict[str, Any], scaling_config: Any,
                 run_config: Any, metadata: Dict[str, Any]) -> Any:
    """The pipeline's trainer: DDP on ``train_func_files``, pixels min-max scaled by a
    preprocessor fitted here on ``train`` and saved with every checkpoint (so that
    prediction applies it too)."""
    import functools

    from engine.storage import resolve
    from engine.preprocessors import MinMaxScaler
    from engine.torch import TorchTrainer

    if set(datasets) != {"train", "validation"}:
        from engine.exceptions import ConfigError

        raise ConfigError(f"The digits pipeline trains on datasets 'train' and "
                          f"'validation' (split()'s output), got {sorted(datasets)}.")
    label = metadata.get("label_column") or SPEC.label_column
    sources = {k: resolve(v) for k, v in datasets.items()}  # filesystems travel along
    train_df = read_table(sources["train"])
    features = metadata.get("feature_columns") or [c for c in train_df if c != label]
    scaler = MinMaxScaler(features).fit(train_df)
    return TorchTrainer(
        functools.partial(train_func_files, data=sources, label_column=label,
                          preprocessor=scaler),
        train_loop_config=dict(config), scaling_config=scaling_config,
        run_config=run_config, preprocessor=scaler, metadata=metadata)


def predictor_kwargs(config: Dict[str, Any]) -> Dict[str, Any]:
    return {"model": build_model(int(config.get("hidden", 64)))}


def _make_spec():
    from pipelines import PipelineSpec

    return PipelineSpec(
        name="digits",
        description="8x8 handwritten digits (scikit-learn), an MLP trained with DDP",
        framework="torch", source="sklearn:digits", label_column="target",
        task="classification", metric="accuracy", mode="max",
        defaults={"lr": 3e-3, "hidden": 64, "batch_size": 32, "epochs": 15, "seed": 0},
        param_space={"lr": {"grid_search": [1e-3, 5e-3]},
                     "hidden": {"grid_search": [32, 64]}},
        epochs_key="epochs", gate={"accuracy": [">=0.9", ">=champion"]},
        make_trainer=make_trainer, predictor_kwargs=predictor_kwargs,
        data_schema=DATA_SCHEMA, drift={"method": "psi", "threshold": 0.2, "fail": False})


SPEC = _make_spec()


def evaluate_checkpoint(checkpoint, hidden: int = 64) -> float:
    """Validation accuracy of the model in a checkpoint made by ``train_func``."""
    import torch

    _, _, X_val, y_val = load_digits_split()
    model = build_model(hidden)
    model.load_state_dict(checkpoint.to_dict()["model_weights"])
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(X_val)).argmax(dim=1).numpy()
    return float((pred == y_val).mean())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--storage", default=None,
                        help="storage path or URI (default ~/trainyard_results)")
    args = parser.parse_args(argv)
    from engine import CheckpointConfig, RunConfig, ScalingConfig
    from engine.torch import TorchTrainer

    trainer = TorchTrainer(
        train_func, train_loop_config={"epochs": args.epochs, "lr": 3e-3, "batch_size": 32},
        scaling_config=ScalingConfig(num_workers=args.workers),
        run_config=RunConfig(storage_path=args.storage, checkpoint_config=CheckpointConfig(
            num_to_keep=2, checkpoint_score_attribute="accuracy")),
    )
    result = trainer.fit()
    shown = {k: result.metrics[k] for k in ("epoch", "loss", "accuracy", "training_iteration")}
    print(f"final metrics: {shown}")
    print(f"checkpoint:    {result.checkpoint.uri}")
    print(f"run directory: {result.path}")
    print(f"validation accuracy of the checkpoint: {evaluate_checkpoint(result.checkpoint):.3f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    raise SystemExit(main())
