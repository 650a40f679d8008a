"""XGBoostTrainer with a Ray Dataset: the built-in loop, no training function to write.

From the seed page air-trainers.rst, section "XGBoost Trainer"
(``doc_code/xgboost_trainer.py``). The seed uses 3 workers; this uses 2.
"""

import ray

from engine import ScalingConfig
from engine.runtime import ensure_ray
from engine.xgboost import XGBoostPredictor, XGBoostTrainer

# Start Ray before creating datasets, as fit() would: the cluster in RAY_ADDRESS, else a
# local Ray with at least 4 logical CPUs (TRAINYARD_RAY_NUM_CPUS). ray.data would
# otherwise start one with a CPU per core, and on a 2-core machine the 2 workers would
# leave none for reading.
ensure_ray()

train_dataset = ray.data.from_items([{"x": x, "y": x + 1} for x in range(32)])
trainer = XGBoostTrainer(
    label_column="y",
    params={"objective": "reg:squarederror"},
    scaling_config=ScalingConfig(num_workers=2),
    datasets={"train": train_dataset},
)
result = trainer.fit()
print(result.metrics["train-rmse"])

# One report per boosting round (num_boost_round defaults to 10), the final model saved.
assert result.metrics["training_iteration"] == 10
assert XGBoostTrainer.get_model(result.checkpoint).num_boosted_rounds() == 10
# Each worker boosted on its own 16 of the 32 rows.
assert result.metrics["worker_train_rows"] == 16
# Predict from the checkpoint: y = x + 1 is learnt well within the training range.
predictor = XGBoostPredictor.from_checkpoint(result.checkpoint)
predictions = predictor.predict({"x": [4.0, 20.0]})["predictions"]
assert abs(predictions[0] - 5) < 3 and abs(predictions[1] - 21) < 3, predictions
