"""A tree trainer's data on a worker: its shard of a dataset as features and label.

The XGBoost and LightGBM loops read their matrices with :func:`read_shard`, and so does
the scikit-learn trainer; :func:`known_feature_columns` fills their model cards.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from engine._internal.parquet_shards import ParquetShard
from engine.exceptions import ConfigError

TRAIN_DATASET = "train"


def read_shard(name: str, label_column: Optional[str]) -> Tuple[Any, Any]:
    """This worker's rows of ``datasets[name]`` as ``(features DataFrame, label Series)``
    (label None when ``label_column`` is None)."""
    import pyarrow as pa

    from engine._internal import timeline
    from engine.session import get_context, get_dataset_shard

    shard = get_dataset_shard(name)
    if isinstance(shard, ParquetShard):  # local files this worker reads itself
        tables = [shard.read()]
    else:
        tables = list(shard.iter_batches(batch_size=None, batch_format="pyarrow"))
    tables = [t for t in tables if t.num_rows]
    timeline.mark(f"read_{name}")
    if not tables:
        ctx = get_context()
        raise ConfigError(
            f"Worker rank {ctx.get_world_rank()} received no rows of datasets[{name!r}]: "
            f"it has fewer rows than ScalingConfig(num_workers={ctx.get_world_size()}). "
            "Use fewer workers or more data.")
    df = pa.concat_tables(tables, promote_options="default").to_pandas()
    if label_column is None:
        return df, None
    if label_column not in df.columns:
        raise ConfigError(
            f"label_column={label_column!r} is not a column of datasets[{name!r}] "
            f"(columns: {list(df.columns)}): pass the name of the label column.")
    return df.drop(columns=[label_column]), df[label_column]


def known_feature_columns(data: Any, label_column: Optional[str],
                          preprocessor: Any = None) -> Optional[List[str]]:
    """The feature columns of the training data when they are known without reading it
    (a DataFrame, a Dataset whose schema is known) and no custom preprocessor may
    change them; None otherwise."""
    from engine._internal.batches import preprocessor_columns

    if preprocessor is not None and preprocessor_columns(preprocessor) is None:
        return None
    names: Optional[Sequence[str]] = None
    if hasattr(data, "columns") and hasattr(data, "iloc"):  # pandas
        names = [str(c) for c in data.columns]
    elif type(data).__module__.startswith("ray.data"):
        try:
            schema = data.schema(fetch_if_missing=False)
            names = list(schema.names) if schema is not None else None
        except Exception:
            names = None
    if names is None:
        return None
    return [n for n in names if n != label_column]
