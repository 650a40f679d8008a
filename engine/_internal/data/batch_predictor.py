"""BatchPredictor: a checkpoint's model scoring a whole dataset on a pool of Ray actors
(Ray Data ``map_batches``). Public as ``engine.predict.BatchPredictor``."""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import threading
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from engine import constants
from engine import preprocessors as _pp
from engine._internal.data import batches as _batches
from engine._internal.data.datasets import to_ray_dataset
from engine._internal.ray_runtime.start import ensure_ray
from engine._internal.storage import filesystem as _storage
from engine.checkpoint import Checkpoint
from engine.exceptions import ConfigError
from engine.predictor import Predictor, get_predictor_class, required_columns

logger = logging.getLogger("engine")


class _ScoringActor:
    """One actor of the pool: loads the model once, then scores batch after batch."""

    def __init__(self, checkpoint: Checkpoint, predictor_cls: type,
                 predictor_kwargs: Dict[str, Any], feature_columns: Optional[List[str]],
                 keep_columns: List[str]) -> None:
        self.predictor = predictor_cls.from_checkpoint(checkpoint, **predictor_kwargs)
        self.feature_columns = feature_columns
        self.keep_columns = keep_columns

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        out = {c: batch[c] for c in self.keep_columns}
        out.update(self.predictor._predict_batch(batch, self.feature_columns,
                                                 exclude=self.keep_columns))
        return out


class BatchPredictor:
    """Scores a whole dataset with a pool of Ray actors, each loading the model once.

    Args:
        checkpoint: The checkpoint to load (the framework check happens here, on the
            driver, before any actor starts).
        predictor_cls: A :class:`Predictor` subclass; None picks the one registered for
            the model card's framework.
        **predictor_kwargs: Passed to ``predictor_cls.from_checkpoint`` in every actor.

    Raises:
        FrameworkMismatchError: the checkpoint holds another framework's model.
    """

    def __init__(self, checkpoint: Checkpoint, predictor_cls: Optional[type] = None,
                 **predictor_kwargs: Any) -> None:
        if not isinstance(checkpoint, Checkpoint):
            raise ConfigError(f"BatchPredictor needs an engine.Checkpoint, got "
                              f"{type(checkpoint).__name__}.")
        self.checkpoint = checkpoint
        self.model_card = checkpoint.get_model_card()
        if predictor_cls is None:
            predictor_cls = get_predictor_class((self.model_card or {}).get("framework"))
        if not (isinstance(predictor_cls, type) and issubclass(predictor_cls, Predictor)):
            raise ConfigError(f"predictor_cls must be a Predictor subclass, got "
                              f"{predictor_cls!r}.")
        predictor_cls.check_framework(self.model_card, checkpoint)
        self.predictor_cls = predictor_cls
        self.predictor_kwargs = predictor_kwargs

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, predictor_cls: Optional[type] = None,
                        **predictor_kwargs: Any) -> "BatchPredictor":
        """Same as the constructor (the Ray AIR spelling)."""
        return cls(checkpoint, predictor_cls, **predictor_kwargs)

    def predict(self, data: Any, *, batch_size: int = constants.DEFAULT_PREDICT_BATCH_SIZE,
                num_workers: int = 1, use_gpu: bool = False,
                feature_columns: Optional[Sequence[str]] = None,
                keep_columns: Optional[Sequence[str]] = None,
                output_uri: Optional[str] = None, num_cpus_per_worker: float = 1.0,
                preserve_order: bool = True) -> Any:
        """Score ``data`` with ``num_workers`` actors (Ray Data ``map_batches``).

        Args:
            data: A ``ray.data.Dataset``, a pandas DataFrame, or a local/``s3://`` path
                of Parquet or CSV files (as the trainers' ``datasets=``).
            batch_size: Rows per model call.
            num_workers: Actors in the pool (each loads the model once).
            use_gpu: One GPU per actor (the predictor's ``use_gpu=True``).
            feature_columns: The model's input columns; default: the model card's, else
                every column but ``keep_columns`` and the card's label column.
            keep_columns: Input columns copied to the output beside ``"predictions"``
                (an id column, the label), with their values before preprocessing.
            output_uri: A directory (local or URI) to write the predictions to as
                Parquet; its previous content is replaced. The returned dataset then
                reads those files.
            num_cpus_per_worker: Logical CPUs each actor reserves.
            preserve_order: Output rows in input order (Ray Data's ``preserve_order``).

        Returns:
            A ``ray.data.Dataset`` of predictions (lazy unless ``output_uri`` is given).

        Raises:
            MissingColumnsError: the dataset lacks a column the checkpoint or the
                arguments need (checked on the schema, before any actor starts).
        """
        if batch_size is not None and batch_size < 1 or num_workers < 1:
            raise ConfigError("batch_size and num_workers must be ≥ 1.")
        ensure_ray()
        ds = _open_dataset(data)
        keep = [keep_columns] if isinstance(keep_columns, str) else list(keep_columns or [])
        features = self._check_schema(ds, feature_columns, keep)
        out = ds.map_batches(
            _ScoringActor, batch_size=batch_size, batch_format="numpy",
            fn_constructor_args=(self.checkpoint, self.predictor_cls,
                                 self._actor_kwargs(use_gpu), features, keep),
            compute=_actor_pool(num_workers), num_cpus=num_cpus_per_worker,
            num_gpus=1 if use_gpu else 0)
        if preserve_order:
            out = _with_preserve_order(out)
        if output_uri is None:
            return out
        return _write_parquet(out, output_uri)

    def _check_schema(self, ds: Any, feature_columns: Optional[Sequence[str]],
                      keep: List[str]) -> Optional[List[str]]:
        """Fail on missing columns from the dataset's schema; return the feature columns
        to give the actors (None: a custom preprocessor's output decides)."""
        schema = ds.schema()
        available = list(schema.names) if schema is not None else []
        preprocessor = self._driver_preprocessor()
        required = required_columns(self.model_card, preprocessor, feature_columns, keep)
        _batches.check_columns(available, required, "The dataset")
        if _batches.preprocessor_columns(preprocessor) is None:
            return list(feature_columns) if feature_columns else None
        features = _batches.resolve_feature_columns(feature_columns, self.model_card,
                                                    available, exclude=keep)
        if not feature_columns and not (self.model_card or {}).get("feature_columns"):
            logger.info("Feature columns: %s (all but keep_columns and the label: the model "
                        "card names none; pass feature_columns=[...] to choose).", features)
        return features

    def _driver_preprocessor(self) -> Any:
        """The checkpoint's preprocessor if it is a built-in one (JSON: reading it runs no
        code); a custom (pickled) one is only loaded in the actors."""
        st = _storage.Storage(self.checkpoint.filesystem, self.checkpoint.path)
        if st.exists(_storage.join(self.checkpoint.path, _pp.PICKLE_FILE)):
            if not self.predictor_kwargs.get("allow_pickle"):
                # Fail here, before any actor starts, with the loader's own message.
                self.checkpoint.get_preprocessor(allow_pickle=False)
            return _CustomPreprocessor()
        # JSON, or Ray Data's preprocessors (read without running code unless allowed).
        return self.checkpoint.get_preprocessor(
            allow_pickle=bool(self.predictor_kwargs.get("allow_pickle")))

    def _actor_kwargs(self, use_gpu: bool) -> Dict[str, Any]:
        kwargs = dict(self.predictor_kwargs)
        params = inspect.signature(self.predictor_cls._from_checkpoint).parameters
        if "use_gpu" in params:
            kwargs.setdefault("use_gpu", use_gpu)
        elif use_gpu:
            raise ConfigError(f"{self.predictor_cls.__name__} does not run on GPUs: pass "
                              "use_gpu=False.")
        return kwargs

    def __repr__(self) -> str:
        return f"BatchPredictor({self.checkpoint!r}, {self.predictor_cls.__name__})"


class _CustomPreprocessor:
    """Stands for a pickled preprocessor on the driver: its columns are unknown."""


_context_lock = threading.Lock()


def _open_dataset(data: Any) -> Any:
    """``data`` as a Ray Dataset; Parquet/CSV paths are read into blocks of about
    ``DEFAULT_PREDICT_READ_BLOCK_BYTES`` (one block feeds one actor task, so Ray's
    128 MiB default leaves actors idle on a single large file)."""
    is_path = isinstance(data, (str, os.PathLike)) or (
        isinstance(data, (list, tuple)) and data
        and all(isinstance(p, (str, os.PathLike)) for p in data))
    if not is_path:
        return to_ray_dataset("data", data)
    target = constants.get(constants.PREDICT_READ_BLOCK_BYTES_ENV_VAR)
    with _read_block_size(target):
        return to_ray_dataset("data", data)


@contextlib.contextmanager
def _read_block_size(target: int):
    # A read copies the current DataContext into its dataset (bucket sizing happens at
    # creation, block splitting at execution): set it for that moment only.
    import ray.data

    with _context_lock:
        ctx = ray.data.DataContext.get_current()
        old = ctx.target_max_block_size
        ctx.target_max_block_size = target
        try:
            yield
        finally:
            ctx.target_max_block_size = old


def _actor_pool(size: int) -> Any:
    import ray.data

    return ray.data.ActorPoolStrategy(size=size)


def _with_preserve_order(ds: Any) -> Any:
    # The option lives in the dataset's DataContext, which map_batches shares with the
    # input dataset: a deep copy (its own DataContext) keeps the caller's setting.
    out = type(ds).copy(ds, _deep_copy=True)
    out.context.execution_options.preserve_order = True
    return out


def _write_parquet(ds: Any, output_uri: str) -> Any:
    from ray.data import SaveMode

    if not _storage.is_uri(output_uri):
        output_uri = os.path.abspath(os.path.expanduser(output_uri))
    fs, inner = _storage.resolve(output_uri)
    ds.write_parquet(inner, filesystem=fs, mode=SaveMode.OVERWRITE)
    return _open_dataset(output_uri)
