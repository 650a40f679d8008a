"""XGBoost and LightGBM checkpoints, predictors and configs without a cluster: what
their shared base does for each framework (file names, fallbacks, the errors users see)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from engine import Checkpoint
from engine.exceptions import CheckpointError, ConfigError

xgboost = pytest.importorskip("xgboost")
lightgbm = pytest.importorskip("lightgbm")

from engine.lightgbm import LightGBMCheckpoint, LightGBMConfig, LightGBMPredictor  # noqa: E402
from engine.xgboost import XGBoostCheckpoint, XGBoostConfig, XGBoostPredictor  # noqa: E402


def _frame(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(rng.random((200, 3)), columns=["a", "b", "c"])
    return df.assign(y=(df["a"] + 0.2 * rng.random(200) > 0.6).astype(int))


def _xgb_booster() -> "xgboost.Booster":
    df = _frame()
    return xgboost.train({"objective": "binary:logistic"},
                         xgboost.DMatrix(df[["a", "b", "c"]], label=df["y"]), 3)


def _lgb_booster() -> "lightgbm.Booster":
    df = _frame()
    return lightgbm.train({"objective": "binary", "verbose": -1},
                          lightgbm.Dataset(df[["a", "b", "c"]], label=df["y"]), 3)


@pytest.mark.parametrize("make, cls, name", [
    (_xgb_booster, XGBoostCheckpoint, "model.ubj"),
    (_lgb_booster, LightGBMCheckpoint, "model.txt"),
])
def test_a_saved_booster_loads_back_and_predicts_the_same(make, cls, name, tmp_path):
    booster = make()
    checkpoint = cls.from_model(booster)
    assert os.listdir(checkpoint.path) == [name]
    local = Checkpoint.from_directory(checkpoint.to_directory(str(tmp_path / "c")))
    loaded = cls.wrap(local).get_model()
    x = _frame(1)[["a", "b", "c"]]
    ours = XGBoostPredictor if cls is XGBoostCheckpoint else LightGBMPredictor
    scored = ours.from_checkpoint(local).predict(x)["predictions"]
    np.testing.assert_allclose(scored, ours(booster).predict(x)["predictions"])
    assert type(loaded) is type(booster)


def test_an_xgboost_checkpoint_written_as_json_still_loads(tmp_path):
    booster = _xgb_booster()
    booster.save_model(str(tmp_path / "model.json"))  # how Ray AIR saved it
    loaded = XGBoostCheckpoint.from_directory(str(tmp_path)).get_model()
    assert loaded.num_boosted_rounds() == 3


def test_a_checkpoint_without_the_model_names_its_files_and_the_fix(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"x")
    checkpoint = Checkpoint.from_directory(str(tmp_path))
    with pytest.raises(CheckpointError) as xgb_error:
        XGBoostCheckpoint.wrap(checkpoint).get_model()
    assert "holds no XGBoost model (model.ubj, model.json, model.xgb, model); it has " \
           "['weights.bin']. Save one with XGBoostCheckpoint.from_model(booster) or " \
           "engine.xgboost.ReportCallback, or pass filename=..." in str(xgb_error.value)
    with pytest.raises(CheckpointError) as lgb_error:
        LightGBMPredictor.from_checkpoint(checkpoint, filename="m.txt")
    assert "holds no LightGBM model 'm.txt'; it has ['weights.bin']. Save one with " \
           "LightGBMCheckpoint.from_model(booster) or engine.lightgbm.ReportCallback" \
           in str(lgb_error.value)


def test_predictors_take_only_their_own_booster():
    with pytest.raises(ConfigError, match=r"XGBoostPredictor\(model=...\) takes an "
                                          r"xgboost.Booster, got Booster"):
        XGBoostPredictor(_lgb_booster())
    with pytest.raises(ConfigError, match="takes a lightgbm.Booster, got dict"):
        LightGBMPredictor({})


@pytest.mark.parametrize("cls", [XGBoostConfig, LightGBMConfig])
@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "60"])
def test_config_timeouts_must_be_positive_integers(cls, bad):
    with pytest.raises(ConfigError, match=rf"{cls.__name__}\(timeout_s="):
        cls(timeout_s=bad)
    assert cls(timeout_s=60).timeout_s == 60


# --- a shard as the framework's input ------------------------------------------------------
def _table(**extra):
    import pyarrow as pa

    df = _frame(1)
    cols = {c: pa.array(df[c].to_numpy(np.float32)) for c in ("a", "b", "c")}
    return pa.table({**cols, **extra, "y": pa.array(df["y"].to_numpy(np.int32))})


def test_a_numeric_shard_reaches_lightgbm_as_arrow_and_trains_the_same_model():
    from engine._internal.gbdt.data import arrow_split, pandas_split

    table = _table()
    x, y = arrow_split(table, "train", "y")
    assert x.column_names == ["a", "b", "c"] and list(y) == table.column("y").to_pylist()
    params = {"objective": "binary", "verbose": -1, "num_leaves": 7, "min_data_in_leaf": 5}
    models = [lightgbm.train(params, lightgbm.Dataset(fx, label=fy), 5).model_to_string()
              for fx, fy in ((x, y), pandas_split(table, "train", "y"))]
    # The same trees; only the pandas categories differ (none either way): the built-in
    # loop writes [] for Arrow input too, so its model files stay byte-identical.
    assert models[0].replace("pandas_categorical:null", "pandas_categorical:[]") == models[1]


@pytest.mark.parametrize("extra", [
    {"s": ["x"] * 200},                                    # a string column
    {"n": [None] + [1.0] * 199},                           # a null
])
def test_a_shard_arrow_cannot_take_as_is_goes_through_pandas(extra):
    from engine._internal.gbdt.data import arrow_split, pandas_split

    table = _table(**extra)
    assert arrow_split(table, "train", "y") is None
    x, y = pandas_split(table, "train", "y")
    assert list(x.columns) == ["a", "b", "c", *extra] and len(y) == 200


def test_a_missing_label_column_names_the_columns():
    from engine._internal.gbdt.data import arrow_split

    with pytest.raises(ConfigError, match="label_column='target'.*'a', 'b', 'c', 'y'"):
        arrow_split(_table(), "train", "target")
