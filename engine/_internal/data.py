"""Turning the trainer's ``datasets=`` into per-worker shards (Ray Data)."""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, List

from engine.config import DataConfig
from engine.exceptions import ConfigError

logger = logging.getLogger("engine")


def to_ray_dataset(name: str, data: Any) -> Any:
    """A ``ray.data.Dataset`` from a Dataset, a pandas DataFrame or a Parquet/CSV path."""
    import ray.data

    if isinstance(data, ray.data.Dataset):
        return data
    try:
        import pandas as pd

        if isinstance(data, pd.DataFrame):
            return ray.data.from_pandas(data)
    except ImportError:
        pass
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        lowered = path.lower().rstrip("/")
        if lowered.endswith(".csv"):
            return ray.data.read_csv(path)
        return ray.data.read_parquet(path)
    raise ConfigError(
        f"datasets[{name!r}] is a {type(data).__name__}: pass a ray.data.Dataset, a pandas "
        "DataFrame, or a path/URI to Parquet or CSV files."
    )


def make_shards(datasets: Dict[str, Any], data_config: DataConfig, n: int
                ) -> Dict[str, List[Any]]:
    """For each dataset, one iterator per worker: split ones stream disjoint shards."""
    out: Dict[str, List[Any]] = {}
    for name, data in datasets.items():
        ds = to_ray_dataset(name, data)
        if data_config.should_split(name) and n > 1:
            out[name] = ds.streaming_split(n, equal=True)
        else:
            out[name] = [ds.iterator() for _ in range(n)]
    return out
