"""Issue 23, gap 10 without a Ray cluster: Ray Data's preprocessors where trainyard takes
one, their checkpoint file, and the loader that runs no foreign code."""

from __future__ import annotations

import pickle

import pandas as pd
import pytest

from engine import Checkpoint, ConfigError
from engine._internal.storage.filesystem import Storage
from engine.exceptions import CheckpointError
from engine.preprocessors import (RAY_FILE, RayDataPreprocessor, StandardScaler,
                                  as_preprocessor, dumps, loads, save_preprocessor)

preprocessors = pytest.importorskip("engine.data.preprocessors")


def test_as_preprocessor_wraps_ray_and_keeps_ours():
    ours = StandardScaler(["a"])
    assert as_preprocessor(ours) is ours and as_preprocessor(None) is None
    wrapped = as_preprocessor(preprocessors.Concatenator(columns=["a", "b"]))
    assert isinstance(wrapped, RayDataPreprocessor) and wrapped.fitted  # not fittable
    with pytest.raises(ConfigError, match="ray.data.preprocessors"):
        as_preprocessor(object())
    with pytest.raises(ConfigError, match="passes the class"):
        as_preprocessor(preprocessors.OneHotEncoder)


def test_unfitted_ray_preprocessor_says_so():
    wrapped = as_preprocessor(preprocessors.OneHotEncoder(columns=["c"]))
    assert not wrapped.fitted
    with pytest.raises(ConfigError, match="not fitted"):
        wrapped.transform_batch(pd.DataFrame({"c": ["x"]}))


def test_checkpoint_roundtrip_without_pickle(tmp_path):
    chain = preprocessors.Chain(
        preprocessors.SimpleImputer(columns=["a"], strategy="constant", fill_value=0.0),
        preprocessors.Concatenator(columns=["a", "b"], output_column_name="f"))
    save_preprocessor(Storage.from_path(str(tmp_path)), str(tmp_path),
                      as_preprocessor(chain))
    assert (tmp_path / RAY_FILE).exists()
    loaded = Checkpoint.from_directory(str(tmp_path)).get_preprocessor(allow_pickle=False)
    out = loaded.transform_batch(pd.DataFrame({"a": [None, 2.0], "b": [1.0, 1.0]}))
    assert [list(v) for v in out["f"]] == [[0.0, 1.0], [2.0, 1.0]]


class _Evil:
    def __reduce__(self):
        return (print, ("ran code",))


def test_loader_refuses_anything_else():
    name, _ = dumps(as_preprocessor(preprocessors.Concatenator(columns=["a"])))
    assert name == RAY_FILE
    with pytest.raises(CheckpointError, match="allow_pickle=True"):
        loads(RAY_FILE, pickle.dumps(_Evil()), allow_pickle=False)
