"""Preprocessors: a transform fitted once on the training data, saved with checkpoints.

    from engine.preprocessors import StandardScaler
    trainer = TorchTrainer(train_func, datasets={"train": ds, "validation": val},
                           preprocessor=StandardScaler(["x1", "x2"]))
    ...
    scaler = result.checkpoint.get_preprocessor()
    batch = scaler.transform_batch(df)        # the same transform, at prediction time

The trainer fits the preprocessor on the ``"train"`` dataset (unless it is fitted
already) and transforms every dataset before it is split across workers; each committed
checkpoint then holds the fitted preprocessor. Built-in preprocessors are stored as JSON
(``preprocessor.json``: loading it runs no code); a custom subclass is pickled
(``preprocessor.pkl``), so load such a checkpoint only if you trust it.

:func:`save_preprocessor` and :func:`load_preprocessor` put a fitted preprocessor into a
checkpoint directory and read it back (``Checkpoint.get_preprocessor()`` uses the latter).

A custom preprocessor subclasses :class:`Preprocessor` and implements ``_fit`` (skip it
for a stateless transform: set ``_is_fittable = False``) and ``transform_batch``.
"""

from __future__ import annotations

import json
import pickle
from typing import Any, Dict, List, Optional, Sequence, Tuple

from engine._internal.storage.filesystem import Storage, join
from engine.exceptions import CheckpointError, ConfigError

JSON_FILE = "preprocessor.json"
PICKLE_FILE = "preprocessor.pkl"
_JSON_FORMAT = "trainyard.preprocessor/1"


class PreprocessorNotFittedError(ConfigError):
    """``transform`` was called on a preprocessor that needs ``fit`` first."""


class Preprocessor:
    """Base class: ``fit(ds)`` learns state, ``transform(ds)`` / ``transform_batch(df)``
    apply it.

    ``ds`` is a ``ray.data.Dataset`` or a pandas DataFrame; ``transform_batch`` takes a
    pandas DataFrame (or a dict of numpy arrays) and returns the same kind.
    """

    _is_fittable = True

    def __init__(self) -> None:
        self._fitted = False

    # --- public ------------------------------------------------------------------
    @property
    def fitted(self) -> bool:
        return self._fitted or not self._is_fittable

    def fit(self, ds: Any) -> "Preprocessor":
        """Learn the state from ``ds`` (a Ray Dataset or a pandas DataFrame); returns self."""
        if self._is_fittable:
            self._fit(ds)
            self._fitted = True
        return self

    def fit_transform(self, ds: Any) -> Any:
        return self.fit(ds).transform(ds)

    def transform(self, ds: Any) -> Any:
        """The transformed dataset: lazy ``map_batches`` for a Ray Dataset, a new
        DataFrame for a DataFrame."""
        self._check_fitted()
        if _is_pandas(ds):
            return self.transform_batch(ds)
        return ds.map_batches(_BatchFn(self), batch_format="pandas", zero_copy_batch=False)

    def transform_batch(self, batch: Any) -> Any:
        """Apply the fitted transform to one batch (what prediction calls)."""
        raise NotImplementedError

    # --- for subclasses -----------------------------------------------------------
    def _fit(self, ds: Any) -> None:
        raise NotImplementedError

    def _check_fitted(self) -> None:
        if not self.fitted:
            raise PreprocessorNotFittedError(
                f"{type(self).__name__} is not fitted: call fit(dataset) first, or pass it "
                "to a trainer, which fits it on datasets['train']."
            )

    def _get_state(self) -> Dict[str, Any]:
        """JSON-able state of a built-in preprocessor (its constructor args and fit)."""
        raise NotImplementedError

    @classmethod
    def _from_state(cls, state: Dict[str, Any]) -> "Preprocessor":
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(fitted={self.fitted})"


class _BatchFn:
    """A picklable ``map_batches`` function bound to one fitted preprocessor."""

    def __init__(self, preprocessor: Preprocessor) -> None:
        self.preprocessor = preprocessor

    def __call__(self, batch):
        return self.preprocessor.transform_batch(batch)


class _ColumnStats(Preprocessor):
    """A per-column affine transform ``(x - offset) / scale`` learnt from the data."""

    def __init__(self, columns: Sequence[str]) -> None:
        super().__init__()
        if isinstance(columns, str) or not columns:
            raise ConfigError(f"{type(self).__name__}(columns=...) takes a non-empty list of "
                              "column names.")
        self.columns: List[str] = list(columns)
        self.stats_: Dict[str, Tuple[float, float]] = {}  # column -> (offset, scale)

    def _aggregates(self, ds: Any) -> Dict[str, Tuple[float, float]]:
        raise NotImplementedError

    def _fit(self, ds: Any) -> None:
        missing = [c for c in self.columns if c not in _column_names(ds)]
        if missing:
            raise ConfigError(f"{type(self).__name__}: columns {missing} are not in the "
                              f"dataset (it has {_column_names(ds)}).")
        self.stats_ = {c: (float(o), float(s) if s and s == s else 1.0)
                       for c, (o, s) in self._aggregates(ds).items()}

    def transform_batch(self, batch: Any) -> Any:
        self._check_fitted()
        out = batch.copy()
        for col in self.columns:
            offset, scale = self.stats_[col]
            values = out[col]
            dtype = getattr(values, "dtype", None)
            scaled = (values - offset) / scale
            if dtype is not None and getattr(dtype, "kind", "") == "f":
                scaled = scaled.astype(dtype)  # float32 stays float32
            out[col] = scaled
        return out

    def _get_state(self) -> Dict[str, Any]:
        return {"columns": self.columns, "stats": {c: list(v) for c, v in self.stats_.items()},
                "fitted": self._fitted}

    @classmethod
    def _from_state(cls, state: Dict[str, Any]) -> "Preprocessor":
        obj = cls(state["columns"])
        obj.stats_ = {c: (float(v[0]), float(v[1])) for c, v in state["stats"].items()}
        obj._fitted = bool(state["fitted"])
        return obj

    def __repr__(self) -> str:
        return f"{type(self).__name__}(columns={self.columns!r}, fitted={self.fitted})"


class StandardScaler(_ColumnStats):
    """Scale columns to zero mean and unit variance: ``(x - mean) / std``.

    ``std`` is the population standard deviation (``ddof=0``, as scikit-learn's); a
    constant column is only centred.
    """

    def _aggregates(self, ds: Any) -> Dict[str, Tuple[float, float]]:
        if _is_pandas(ds):
            return {c: (ds[c].mean(), ds[c].std(ddof=0)) for c in self.columns}
        from ray.data.aggregate import Mean, Std

        aggs = []
        for c in self.columns:
            aggs += [Mean(c, alias_name=f"mean({c})"), Std(c, ddof=0, alias_name=f"std({c})")]
        row = ds.aggregate(*aggs)
        return {c: (row[f"mean({c})"], row[f"std({c})"]) for c in self.columns}


class MinMaxScaler(_ColumnStats):
    """Scale columns to ``[0, 1]``: ``(x - min) / (max - min)``."""

    def _aggregates(self, ds: Any) -> Dict[str, Tuple[float, float]]:
        if _is_pandas(ds):
            lo_hi = {c: (ds[c].min(), ds[c].max()) for c in self.columns}
        else:
            from ray.data.aggregate import Max, Min

            aggs = []
            for c in self.columns:
                aggs += [Min(c, alias_name=f"min({c})"), Max(c, alias_name=f"max({c})")]
            row = ds.aggregate(*aggs)
            lo_hi = {c: (row[f"min({c})"], row[f"max({c})"]) for c in self.columns}
        return {c: (lo, hi - lo) for c, (lo, hi) in lo_hi.items()}


class Chain(Preprocessor):
    """Several preprocessors applied in order; each is fitted on the output of the ones
    before it."""

    def __init__(self, *preprocessors: Preprocessor) -> None:
        super().__init__()
        if not preprocessors or not all(isinstance(p, Preprocessor) for p in preprocessors):
            raise ConfigError("Chain(...) takes one or more Preprocessor instances.")
        self.preprocessors = list(preprocessors)

    @property
    def fitted(self) -> bool:
        return all(p.fitted for p in self.preprocessors)

    def _fit(self, ds: Any) -> None:
        for i, p in enumerate(self.preprocessors):
            if not p.fitted:
                p.fit(ds)
            if i < len(self.preprocessors) - 1:
                ds = p.transform(ds)

    def transform(self, ds: Any) -> Any:
        self._check_fitted()
        for p in self.preprocessors:
            ds = p.transform(ds)
        return ds

    def transform_batch(self, batch: Any) -> Any:
        self._check_fitted()
        for p in self.preprocessors:
            batch = p.transform_batch(batch)
        return batch

    def _get_state(self) -> Dict[str, Any]:
        return {"preprocessors": [_to_json_obj(p) for p in self.preprocessors]}

    @classmethod
    def _from_state(cls, state: Dict[str, Any]) -> "Preprocessor":
        obj = cls(*[_from_json_obj(s) for s in state["preprocessors"]])
        obj._fitted = True
        return obj

    def __repr__(self) -> str:
        return f"Chain({', '.join(map(repr, self.preprocessors))})"


# --- Ray Data's own preprocessors ------------------------------------------------------
RAY_FILE = "ray_preprocessor.pkl"


def is_ray_data_preprocessor(obj: Any) -> bool:
    """Whether ``obj`` is a ``ray.data.preprocessors`` preprocessor (checked without
    importing Ray Data when it was never imported)."""
    import sys

    module = sys.modules.get("ray.data.preprocessor")
    return module is not None and isinstance(obj, module.Preprocessor)


class RayDataPreprocessor(Preprocessor):
    """A ``ray.data.preprocessors`` preprocessor (``OneHotEncoder``, ``SimpleImputer``,
    ``Concatenator``, ``Chain`` …) where trainyard takes a preprocessor: fitted on the
    train dataset, saved in checkpoints (``ray_preprocessor.pkl``, read back with an
    unpickler that admits only Ray Data's preprocessor classes and numpy values), applied
    at prediction. Trainers wrap one for you; ``inner`` is Ray's object."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        if not is_ray_data_preprocessor(inner):
            raise ConfigError(f"RayDataPreprocessor wraps a ray.data.preprocessors "
                              f"preprocessor, got {type(inner).__name__}.")
        self.inner = inner

    @property
    def fitted(self) -> bool:
        status = self.inner.fit_status()
        return status.name in ("FITTED", "NOT_FITTABLE")

    def fit(self, ds: Any) -> "RayDataPreprocessor":
        if _is_pandas(ds):
            import ray.data

            ds = ray.data.from_pandas(ds)
        self.inner.fit(ds)
        return self

    def transform(self, ds: Any) -> Any:
        self._check_fitted()
        if _is_pandas(ds):
            return self.inner.transform_batch(ds)
        return self.inner.transform(ds)

    def transform_batch(self, batch: Any) -> Any:
        self._check_fitted()
        return self.inner.transform_batch(batch)

    def __repr__(self) -> str:
        return f"RayDataPreprocessor({self.inner!r})"


def as_preprocessor(obj: Any, where: str = "preprocessor") -> Optional[Preprocessor]:
    """``obj`` as an engine preprocessor: an ``engine.preprocessors`` one as is, a Ray
    Data one wrapped in :class:`RayDataPreprocessor`, None as None.

    Raises:
        ConfigError: anything else (``where`` names the argument).
    """
    if obj is None or isinstance(obj, Preprocessor):
        return obj
    if is_ray_data_preprocessor(obj):
        return RayDataPreprocessor(obj)
    if isinstance(obj, type):
        raise ConfigError(f"{where}={obj.__name__} passes the class: pass an instance, "
                          f"e.g. {obj.__name__}(columns=[...]).")
    raise ConfigError(
        f"{where} must be an engine.preprocessors.Preprocessor (e.g. StandardScaler(columns)) "
        f"or a ray.data.preprocessors one (e.g. OneHotEncoder(columns)), got "
        f"{type(obj).__name__}.")


class _RayPreprocessorUnpickler(pickle.Unpickler):
    """Admits Ray Data's preprocessor classes (and their enums), numpy arrays and
    scalars, and plain containers: loading runs no other code."""

    _NUMPY = {"_reconstruct", "ndarray", "dtype", "scalar", "_frombuffer"}

    def find_class(self, module: str, name: str) -> Any:
        import enum

        obj = super().find_class(module, name)
        if module.startswith(("ray.data.preprocessors", "ray.data.preprocessor")):
            from ray.data.preprocessor import Preprocessor as RayPreprocessor

            if isinstance(obj, type) and issubclass(obj, (RayPreprocessor, enum.Enum)):
                return obj
        elif module.split(".")[0] == "numpy" and name in self._NUMPY:
            return obj
        elif (module, name) in (("collections", "OrderedDict"),
                                ("collections", "defaultdict"), ("builtins", "set"),
                                ("builtins", "frozenset"), ("builtins", "slice")):
            return obj
        raise pickle.UnpicklingError(f"{module}.{name} is not a Ray Data preprocessor part")


def _load_ray_preprocessor(data: bytes, allow_pickle: bool) -> RayDataPreprocessor:
    import io

    try:
        inner = (pickle.loads(data) if allow_pickle
                 else _RayPreprocessorUnpickler(io.BytesIO(data)).load())
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"The checkpoint's {RAY_FILE} holds more than Ray Data's preprocessors ({exc}): "
            "loading it runs code. If you trust this checkpoint pass allow_pickle=True.") \
            from None
    return RayDataPreprocessor(inner)


# --- (de)serialisation ----------------------------------------------------------------
_BUILTINS = {cls.__name__: cls for cls in (StandardScaler, MinMaxScaler, Chain)}


def _json_able(p: Preprocessor) -> bool:
    if type(p) not in _BUILTINS.values():
        return False  # a subclass may hold state the JSON form does not know about
    if isinstance(p, Chain):
        return all(_json_able(q) for q in p.preprocessors)
    return True


def _to_json_obj(p: Preprocessor) -> Dict[str, Any]:
    return {"type": type(p).__name__, "state": p._get_state()}


def _from_json_obj(obj: Dict[str, Any]) -> Preprocessor:
    cls = _BUILTINS.get(obj.get("type"))
    if cls is None:
        raise ConfigError(f"Unknown preprocessor type {obj.get('type')!r} in {JSON_FILE}.")
    return cls._from_state(obj["state"])


def dumps(preprocessor: Preprocessor) -> Tuple[str, bytes]:
    """``(file name, content)``: JSON for built-ins, a pickle for anything else."""
    if not isinstance(preprocessor, Preprocessor):
        raise ConfigError(f"preprocessor must be an engine.preprocessors.Preprocessor, got "
                          f"{type(preprocessor).__name__}.")
    if _json_able(preprocessor):
        doc = {"format": _JSON_FORMAT, **_to_json_obj(preprocessor)}
        return JSON_FILE, json.dumps(doc, indent=1).encode("utf-8")
    if type(preprocessor) is RayDataPreprocessor:
        return RAY_FILE, pickle.dumps(preprocessor.inner, protocol=pickle.HIGHEST_PROTOCOL)
    return PICKLE_FILE, pickle.dumps(preprocessor, protocol=pickle.HIGHEST_PROTOCOL)


def loads(name: str, data: bytes, allow_pickle: bool = True) -> Preprocessor:
    """The preprocessor in a file written by :func:`dumps` (a pickle is unpickled; Ray
    Data's, with ``allow_pickle=False``, only if it holds nothing but their parts)."""
    if name == RAY_FILE:
        return _load_ray_preprocessor(data, allow_pickle)
    if name == JSON_FILE:
        doc = json.loads(data.decode("utf-8"))
        if doc.get("format") != _JSON_FORMAT:
            raise ConfigError(f"{JSON_FILE} has format {doc.get('format')!r}, expected "
                              f"{_JSON_FORMAT!r}.")
        return _from_json_obj(doc)
    return pickle.loads(data)


# --- in a checkpoint directory -------------------------------------------------------
def save_preprocessor(storage: Storage, checkpoint_dir_path: str, preprocessor: Optional[Any]
                      ) -> Optional[str]:
    """Write ``preprocessor`` into a checkpoint directory in ``storage``.

    Returns the file name written (``preprocessor.json`` for built-ins, ``.pkl``
    otherwise), or None when there is no preprocessor or the checkpoint already holds a
    file of that name (one the training function wrote itself is kept).
    """
    if preprocessor is None:
        return None
    name, data = dumps(preprocessor)
    path = join(checkpoint_dir_path, name)
    if storage.exists(path):
        return None
    storage.write_bytes_atomic(path, data)
    return name


def load_preprocessor(storage: Storage, checkpoint_dir_path: str,
                      allow_pickle: bool = True) -> Optional[Any]:
    """The preprocessor saved in a checkpoint directory, or None (a ``.pkl`` one is
    unpickled only with ``allow_pickle``: trusted checkpoints only)."""
    for name in (JSON_FILE, RAY_FILE, PICKLE_FILE):
        path = join(checkpoint_dir_path, name)
        if storage.exists(path):
            if name == RAY_FILE:
                return loads(name, storage.read_bytes(path), allow_pickle)
            if name == PICKLE_FILE and not allow_pickle:
                raise CheckpointError(
                    f"The checkpoint {storage.display(checkpoint_dir_path)!r} holds a custom "
                    f"preprocessor ({PICKLE_FILE}), a pickle: loading it runs code. If "
                    "you trust this checkpoint pass allow_pickle=True (e.g. "
                    "Predictor.from_checkpoint(ckpt, allow_pickle=True)).")
            return loads(name, storage.read_bytes(path))
    return None


# --- helpers --------------------------------------------------------------------------
def _is_pandas(obj: Any) -> bool:
    try:
        import pandas as pd
    except ImportError:
        return False
    return isinstance(obj, pd.DataFrame)


def _column_names(ds: Any) -> List[str]:
    if _is_pandas(ds):
        return list(ds.columns)
    schema = ds.schema()
    return list(schema.names) if schema is not None else []


__all__ = ["Preprocessor", "StandardScaler", "MinMaxScaler", "Chain", "RayDataPreprocessor",
           "as_preprocessor",
           "PreprocessorNotFittedError", "save_preprocessor", "load_preprocessor"]
