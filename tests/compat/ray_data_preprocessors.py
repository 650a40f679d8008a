"""Ray Data's own preprocessors where a trainer takes a preprocessor (issue 23, gap 10):
fitted on the train dataset, saved in the checkpoint, applied at batch prediction.

Ported from Ray by rewriting imports only: ray.data -> engine.data, ray.train -> engine.
"""

import numpy as np
import pandas as pd

import engine.data
from engine import RunConfig, ScalingConfig
from engine.data.preprocessors import (Chain, OrdinalEncoder, SimpleImputer,
                                       StandardScaler)
from engine.predict import BatchPredictor
from engine.preprocessors import MinMaxScaler
from engine.xgboost import XGBoostPredictor, XGBoostTrainer

rng = np.random.default_rng(0)
n = 400
color = rng.choice(["red", "green", "blue"], n)
x = rng.normal(10, 3, n)
x[::10] = np.nan
df = pd.DataFrame({"x": x, "color": color,
                   "y": ((color == "red") | (np.nan_to_num(x, nan=10) > 12)).astype(float)})
train_ds = engine.data.from_pandas(df.iloc[:300])
valid_ds = engine.data.from_pandas(df.iloc[300:])

preprocessor = Chain(SimpleImputer(columns=["x"], strategy="mean"),
                     StandardScaler(columns=["x"]), OrdinalEncoder(columns=["color"]))
trainer = XGBoostTrainer(
    label_column="y", params={"objective": "binary:logistic", "eval_metric": "error"},
    num_boost_round=10, datasets={"train": train_ds, "valid": valid_ds},
    preprocessor=preprocessor, scaling_config=ScalingConfig(num_workers=1),
    run_config=RunConfig(verbose=0))
result = trainer.fit()
assert result.metrics["valid-error"] < 0.2, result.metrics

# Saved in the checkpoint, fitted on the train split only.
saved = result.checkpoint.get_preprocessor(allow_pickle=False)
assert type(saved.inner).__name__ == "Chain"
train_mean = float(np.nanmean(df["x"].iloc[:300]))
assert abs(saved.inner.preprocessors[0].stats_["mean(x)"] - train_mean) < 1e-9

# Applied at batch prediction (no unpickling of anything but Ray's preprocessors).
scores = BatchPredictor.from_checkpoint(result.checkpoint, XGBoostPredictor).predict(
    df.drop(columns=["y"]).iloc[300:], keep_columns=["color"])
scores = scores.to_pandas()
assert len(scores) == 100 and scores["predictions"].between(0, 1).all(), scores.head()
accuracy = ((scores["predictions"].to_numpy() > 0.5)
            == (df["y"].iloc[300:].to_numpy() > 0.5)).mean()
assert accuracy > 0.8, accuracy

# trainyard's own preprocessors keep working.
result = XGBoostTrainer(
    label_column="y", params={"objective": "binary:logistic"}, num_boost_round=3,
    datasets={"train": df[["x", "y"]]}, preprocessor=MinMaxScaler(["x"]),
    scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(verbose=0)).fit()
assert type(result.checkpoint.get_preprocessor()).__name__ == "MinMaxScaler"
print("OK")
