"""A tree trainer's data on a worker: its shard of a dataset as features and label.

The XGBoost and LightGBM loops read their matrices with :func:`read_shard`, and so does
the scikit-learn trainer; :func:`known_feature_columns` fills their model cards.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from engine._internal.data.parquet_shards import ParquetShard
from engine.exceptions import ConfigError

TRAIN_DATASET = "train"


def read_shard(name: str, label_column: Optional[str]) -> Tuple[Any, Any]:
    """This worker's rows of ``datasets[name]`` as ``(features DataFrame, label Series)``
    (label None when ``label_column`` is None)."""
    return pandas_split(read_shard_table(name), name, label_column)


def pandas_split(table: Any, name: str, label_column: Optional[str]) -> Tuple[Any, Any]:
    """A shard's table as ``(features DataFrame, label Series)`` (label None when
    ``label_column`` is None)."""
    _check_label(table, name, label_column)
    df = table.to_pandas()
    if label_column is None:
        return df, None
    return df.drop(columns=[label_column]), df[label_column]


def arrow_split(table: Any, name: str, label_column: str) -> Optional[Tuple[Any, Any]]:
    """A shard's table as ``(features pyarrow Table, label NumPy array)``, with no
    pandas copy, when every feature column is a number or a boolean without nulls (what
    a framework's Arrow input takes as is); None otherwise (strings, categories, nulls:
    use :func:`pandas_split`, whose conversion the frameworks know how to handle)."""
    import pyarrow as pa

    _check_label(table, name, label_column)
    features = table.drop_columns([label_column])
    for field, column in zip(features.schema, features.columns):
        kind = field.type
        if column.null_count or not (pa.types.is_integer(kind) or pa.types.is_floating(kind)
                                     or pa.types.is_boolean(kind)):
            return None
    return features, table.column(label_column).to_numpy()  # nulls: NaN, as in pandas


def read_shard_table(name: str) -> Any:
    """This worker's rows of ``datasets[name]`` as one ``pyarrow.Table``.

    Raises:
        ConfigError: the worker got no rows (more workers than rows).
    """
    import pyarrow as pa

    from engine._internal.run_state import timeline
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
    return pa.concat_tables(tables, promote_options="default")


def _check_label(table: Any, name: str, label_column: Optional[str]) -> None:
    if label_column is not None and label_column not in table.column_names:
        raise ConfigError(
            f"label_column={label_column!r} is not a column of datasets[{name!r}] "
            f"(columns: {table.column_names}): pass the name of the label column.")


def known_feature_columns(data: Any, label_column: Optional[str],
                          preprocessor: Any = None) -> Optional[List[str]]:
    """The feature columns of the training data when they are known without reading it
    (a DataFrame, a Dataset whose schema is known) and no custom preprocessor may
    change them; None otherwise."""
    from engine._internal.data.batches import preprocessor_columns

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
