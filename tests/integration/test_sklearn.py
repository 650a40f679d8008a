"""SklearnTrainer on real Ray: one worker with 2 CPUs, validation and CV scores, the
fitted estimator as the checkpoint, SklearnPredictor."""

from __future__ import annotations

import numpy as np
import pytest

from engine import CheckpointError, ConfigError, RunConfig, ScalingConfig

pytest.importorskip("sklearn")

from sklearn.datasets import load_wine  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from engine.sklearn import SklearnPredictor, SklearnTrainer  # noqa: E402


def wine_split():
    x, y = load_wine(return_X_y=True, as_frame=True)
    df = x.assign(target=y)
    return train_test_split(df, test_size=0.3, random_state=0, stratify=y)


def test_random_forest_on_wine(ray_start_4_cpus, tmp_path):
    train, valid = wine_split()
    estimator = RandomForestClassifier(n_estimators=50, random_state=0)
    result = SklearnTrainer(
        estimator=estimator, datasets={"train": train, "validation": valid},
        label_column="target", cv=5,
        scaling_config=ScalingConfig(trainer_resources={"CPU": 2}),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0)).fit()

    metrics = result.metrics
    assert metrics["validation"]["test_score"] >= 0.9
    assert metrics["fit_time"] > 0
    assert len(metrics["cv"]["test_score"]) == 5
    assert metrics["cv"]["test_score_mean"] == pytest.approx(
        np.mean(metrics["cv"]["test_score"]))

    # The checkpoint holds the fitted estimator; its joblib parallelism came from the
    # 2 CPUs reserved for the worker.
    fitted = SklearnTrainer.get_model(result.checkpoint)
    assert fitted.n_jobs == 2
    x_valid = valid.drop(columns=["target"])
    reference = RandomForestClassifier(n_estimators=50, random_state=0).fit(
        train.drop(columns=["target"]), train["target"])
    np.testing.assert_array_equal(fitted.predict(x_valid), reference.predict(x_valid))
    np.testing.assert_allclose(fitted.predict_proba(x_valid),
                               reference.predict_proba(x_valid))
    assert float((fitted.predict(x_valid) == valid["target"]).mean()) == pytest.approx(
        metrics["validation"]["test_score"])

    # Scoring unpickles only when allowed (a pickle runs code).
    with pytest.raises(CheckpointError, match="allow_pickle=True"):
        SklearnPredictor.from_checkpoint(result.checkpoint)
    predictor = SklearnPredictor.from_checkpoint(result.checkpoint, allow_pickle=True)
    scored = predictor.predict(x_valid)
    np.testing.assert_array_equal(scored["predictions"], reference.predict(x_valid))
    card = result.checkpoint.get_model_card()
    assert card["framework"] == "sklearn" and card["label_column"] == "target"


def test_bad_arguments_say_how_to_fix_them():
    train, _ = wine_split()
    with pytest.raises(ConfigError, match="trainer_resources"):
        SklearnTrainer(estimator=RandomForestClassifier(), datasets={"train": train},
                       label_column="target", scaling_config=ScalingConfig(num_workers=2))
    with pytest.raises(ConfigError, match="datasets"):
        SklearnTrainer(estimator=RandomForestClassifier(), datasets={"valid": train})
    with pytest.raises(ConfigError, match="cv=1"):
        SklearnTrainer(estimator=RandomForestClassifier(), datasets={"train": train}, cv=1)
