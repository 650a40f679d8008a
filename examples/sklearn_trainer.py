"""SklearnTrainer: fit a scikit-learn estimator on one worker with the CPUs it reserves.

The seed page air-trainers.rst leaves "ScikitLearn Trainer" to be filled in; this is
what a Ray AIR user wrote (``ray.train.sklearn.SklearnTrainer``), in trainyard's names.
"""

import ray
from sklearn.ensemble import RandomForestRegressor
from sklearn.model_selection import KFold

from engine import RunConfig, ScalingConfig
from engine.runtime import ensure_ray
from engine.sklearn import SklearnPredictor, SklearnTrainer

# Start Ray before creating datasets, as fit() would: the cluster in RAY_ADDRESS, else a
# local Ray with at least 4 logical CPUs (TRAINYARD_RAY_NUM_CPUS). ray.data would
# otherwise start one with a CPU per core, and on a 2-core machine the 2 workers would
# leave none for reading.
ensure_ray()

train_dataset = ray.data.from_items([{"x": x, "y": 2 * x} for x in range(0, 32, 3)])
valid_dataset = ray.data.from_items([{"x": x, "y": 2 * x} for x in range(1, 32, 3)])

trainer = SklearnTrainer(
    estimator=RandomForestRegressor(n_estimators=20, random_state=0),
    label_column="y",
    scaling_config=ScalingConfig(trainer_resources={"CPU": 2}),
    datasets={"train": train_dataset, "valid": valid_dataset},
    cv=KFold(n_splits=3, shuffle=True, random_state=0),
    run_config=RunConfig(verbose=0),
)
result = trainer.fit()
print(result.metrics["valid"], result.metrics["cv"]["test_score"])

# R² on the held-out points, and one score per cross-validation fold.
assert result.metrics["valid"]["test_score"] > 0.8
assert len(result.metrics["cv"]["test_score"]) == 3
# The estimator is a pickle (loading runs code): allow it for your own runs only.
predictor = SklearnPredictor.from_checkpoint(result.checkpoint, allow_pickle=True)
print(predictor.predict({"x": [10, 20]})["predictions"])
