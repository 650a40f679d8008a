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
