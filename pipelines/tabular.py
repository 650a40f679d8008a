"""The data a pipeline's train function gets: ``train_func(config, data)``.

    def train_func(config, data):                   # runs on every training worker
        X, y = data.arrays("train", shard=True)     # this worker's rows, float32 / labels
        X_val, y_val = data.arrays("validation")    # the whole validation split
        ...
        engine.report({"val_accuracy": acc}, checkpoint=...)

The default trainer of a torch or tensorflow ``PipelineSpec`` hands its ``train_func`` a
:class:`TabularData` over the Parquet tables ``tasks.split`` wrote. Every worker
reads them whole (``shard=True`` keeps every ``world_size``-th row): right for the small
and medium tables most pipelines start with; for data that does not fit one worker, give
the spec your own ``make_trainer`` that passes ``datasets=`` to the trainer and read
``engine.get_dataset_shard("train")``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np


def resolve(uri: str) -> Tuple[Any, str]:
    """``(pyarrow filesystem, path)`` of a storage URI, credentials included."""
    from engine.storage import resolve as _resolve

    return _resolve(uri)


class TabularData:
    """The training splits of one run, for a train function.

    Args:
        sources: ``train``/``validation`` → ``(pyarrow filesystem, path)`` of Parquet.
        label_column: The column to predict.
        feature_columns: The model's inputs, in order (default: every other column).
        task: ``classification`` (integer labels) or ``regression`` (float labels).
        preprocessor: A fitted ``engine.preprocessors`` preprocessor applied to every
            table read (the same one is saved with the checkpoints for prediction).
    """

    def __init__(self, sources: Dict[str, Tuple[Any, str]], label_column: str,
                 feature_columns: Optional[List[str]] = None, task: str = "classification",
                 preprocessor: Any = None) -> None:
        self.sources = dict(sources)
        self.label_column = label_column
        self._features = list(feature_columns) if feature_columns else None
        self.task = task
        self.preprocessor = preprocessor
        self._num_classes: Optional[int] = None

    @property
    def splits(self) -> List[str]:
        return sorted(self.sources)

    @property
    def feature_columns(self) -> List[str]:
        if self._features is None:
            self._features = [c for c in self.frame("train").columns if c != self.label_column]
        return list(self._features)

    @property
    def num_features(self) -> int:
        return len(self.feature_columns)

    @property
    def num_classes(self) -> int:
        """Classes of a classification task: the largest training label + 1."""
        if self._num_classes is None:
            _, y = self.arrays("train")
            self._num_classes = int(y.max()) + 1 if len(y) else 0
        return self._num_classes

    def frame(self, split: str = "train") -> Any:
        """A split as a pandas DataFrame, preprocessed."""
        import pyarrow.dataset as pds

        if split not in self.sources:
            raise KeyError(f"No split {split!r}: this run has {self.splits}.")
        fs, path = self.sources[split]
        df = pds.dataset(path, filesystem=fs, format="parquet").to_table().to_pandas()
        if self.label_column not in df.columns:
            from engine.exceptions import ConfigError

            raise ConfigError(f"The {split} data has no label column {self.label_column!r} "
                              f"(columns: {list(df.columns)}): set the pipeline's "
                              "label_column to one of them.")
        return self.preprocessor.transform_batch(df) if self.preprocessor is not None else df

    def arrays(self, split: str = "train", *, shard: bool = False
               ) -> Tuple[np.ndarray, np.ndarray]:
        """``(features float32 (n, k), labels (n,))`` of a split; labels are int64 for
        classification, float32 for regression. ``shard=True``: only this worker's rows
        (see :func:`shard_rows`), for data-parallel training."""
        df = self.frame(split)
        features = self._features or [c for c in df.columns if c != self.label_column]
        try:
            X = df[features].to_numpy(dtype=np.float32)
            y = df[self.label_column].to_numpy(
                dtype=np.int64 if self.task == "classification" else np.float32)
        except (TypeError, ValueError) as exc:
            from engine.exceptions import ConfigError

            raise ConfigError(f"The {split} data is not all numbers ({exc}): encode text "
                              "columns as numbers (class labels as 0..k-1) before training, "
                              "e.g. in the data you ingest or with a preprocessor.") from exc
        if shard:
            from engine import get_context

            ctx = get_context()
            rows = shard_rows(len(X), ctx.get_world_rank(), ctx.get_world_size())
            X, y = X[rows], y[rows]
        # Writable copies: torch.from_numpy warns about (and shares) read-only buffers.
        return np.require(X, requirements=["C", "W"]), np.require(y, requirements=["W"])


def shard_rows(n: int, rank: int, size: int) -> np.ndarray:
    """Row indices of worker ``rank`` of ``size``: every ``size``-th row, the first rows
    repeated so that every worker gets as many (as ``DistributedSampler`` does): equal
    shards make equal batch counts, which DDP's collective steps need."""
    per_worker = -(-n // size) if n else 0
    rows = np.resize(np.arange(n), per_worker * size) if n else np.arange(0)
    return rows[rank::size]
