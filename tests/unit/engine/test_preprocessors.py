"""Preprocessors on pandas (no cluster): fitting, transforming, saving into a checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from engine import Checkpoint
from engine._internal.data.datasets import _file_format, _file_names
from engine._internal.storage.filesystem import Storage
from engine.exceptions import ConfigError
from engine.preprocessors import (Chain, MinMaxScaler, Preprocessor, PreprocessorNotFittedError,
                                  StandardScaler, dumps, load_preprocessor, loads,
                                  save_preprocessor)


def _df():
    rng = np.random.default_rng(1)
    return pd.DataFrame({"a": rng.normal(3, 2, 50), "b": rng.uniform(-1, 4, 50).astype(np.float32),
                         "c": np.full(50, 7.0), "label": np.arange(50)})


def test_standard_scaler_matches_scikit_learn():
    from sklearn.preprocessing import StandardScaler as SkScaler

    df = _df()
    out = StandardScaler(["a", "b"]).fit(df).transform(df)
    expected = SkScaler().fit_transform(df[["a", "b"]].astype(np.float64))
    np.testing.assert_allclose(out[["a", "b"]].to_numpy(), expected, rtol=1e-5, atol=1e-6)
    assert out["b"].dtype == np.float32           # float32 stays float32
    pd.testing.assert_series_equal(out["label"], df["label"])  # other columns untouched
    assert df["a"].mean() != pytest.approx(0.0)   # the input is not modified


def test_constant_column_is_only_centred_and_minmax_scales_to_unit_range():
    df = _df()
    assert (StandardScaler(["c"]).fit_transform(df)["c"] == 0).all()
    out = MinMaxScaler(["a", "label"]).fit_transform(df)
    assert out["a"].min() == pytest.approx(0) and out["a"].max() == pytest.approx(1)
    assert out["label"].tolist() == pytest.approx(list(np.arange(50) / 49))


def test_transform_batch_takes_numpy_dicts_too():
    df = _df()
    scaler = StandardScaler(["a"]).fit(df)
    batch = {"a": df["a"].to_numpy(), "label": df["label"].to_numpy()}
    np.testing.assert_allclose(scaler.transform_batch(batch)["a"],
                               scaler.transform_batch(df)["a"].to_numpy())


def test_unfitted_and_bad_arguments():
    with pytest.raises(PreprocessorNotFittedError, match="fit"):
        StandardScaler(["a"]).transform_batch(_df())
    with pytest.raises(ConfigError, match="list of column names"):
        StandardScaler("a")
    with pytest.raises(ConfigError, match=r"columns \['zz'\] are not in the dataset"):
        StandardScaler(["zz"]).fit(_df())
    with pytest.raises(ConfigError, match="Preprocessor instances"):
        Chain(object())


def test_chain_fits_each_stage_on_the_previous_output():
    df = _df()
    chain = Chain(StandardScaler(["a"]), MinMaxScaler(["a"])).fit(df)
    out = chain.transform_batch(df)
    assert out["a"].min() == pytest.approx(0) and out["a"].max() == pytest.approx(1)
    # The second stage saw standardised values.
    lo, scale = chain.preprocessors[1].stats_["a"]
    assert lo == pytest.approx(StandardScaler(["a"]).fit_transform(df)["a"].min())


def test_builtins_are_saved_as_json_and_round_trip():
    df = _df()
    chain = Chain(StandardScaler(["a", "b"]), MinMaxScaler(["label"])).fit(df)
    name, data = dumps(chain)
    assert name == "preprocessor.json"
    doc = json.loads(data)
    assert doc["format"] == "trainyard.preprocessor/1" and doc["type"] == "Chain"
    loaded = loads(name, data)
    pd.testing.assert_frame_equal(loaded.transform_batch(df), chain.transform_batch(df))


class AddOne(Preprocessor):
    """A stateless custom preprocessor: stored as a pickle."""

    _is_fittable = False

    def transform_batch(self, batch):
        out = batch.copy()
        out["a"] = out["a"] + 1
        return out


def test_custom_preprocessors_are_pickled(tmp_path):
    df = _df()
    p = Chain(StandardScaler(["a"]), AddOne()).fit(df)
    st = Storage.from_path(str(tmp_path))
    assert save_preprocessor(st, str(tmp_path / "ckpt"), p) == "preprocessor.pkl"
    loaded = Checkpoint.from_directory(str(tmp_path / "ckpt")).get_preprocessor()
    pd.testing.assert_frame_equal(loaded.transform_batch(df), p.transform_batch(df))
    assert load_preprocessor(st, str(tmp_path)) is None
    with pytest.raises(ConfigError, match="Preprocessor"):
        dumps({"not": "a preprocessor"})


def test_file_format_from_names():
    assert _file_format(["s3://b/x.csv"]) == "csv"
    assert _file_format(["a.csv", "b.csv.gz"]) == "csv"
    assert _file_format(["a.csv", "b.parquet"]) == "parquet"
    assert _file_format(["s3://bucket/prefix"]) == "parquet"  # unknown: Parquet
    assert _file_names(["/no/such/dir"]) == ["/no/such/dir"]


def test_trainer_rejects_a_non_preprocessor():
    from engine.trainer import DataParallelTrainer

    with pytest.raises(ConfigError, match="engine.preprocessors.Preprocessor"):
        DataParallelTrainer(lambda: None, preprocessor=object())


def test_an_unfitted_preprocessor_needs_a_train_dataset():
    from engine._internal.data.datasets import prepare_datasets

    with pytest.raises(ConfigError, match=r"no datasets\['train'\].*passed: \['valid'\]"):
        prepare_datasets({"valid": _df()}, StandardScaler(["a"]))
