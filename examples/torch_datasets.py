"""Distributed data ingest: pass Ray Datasets to the trainer, read shards in train_func.

From the seed pages train-configuring-and-results.rst and train-dl-guide.rst, section
"Distributed Data Ingest with Ray Data". The seed reads a CSV file ("...") and uses 8
workers; this builds a small dataset in memory and uses 2.
"""

import ray

from engine import ScalingConfig, session
from engine.runtime import ensure_ray
from engine.torch import TorchTrainer

# Start Ray before creating datasets, as fit() would: the cluster in RAY_ADDRESS, else a
# local Ray with at least 4 logical CPUs (TRAINYARD_RAY_NUM_CPUS). ray.data would
# otherwise start one with a CPU per core, and on a 2-core machine the 2 workers would
# leave none for reading.
ensure_ray()


# Datasets can be accessed in your train_func via ``get_dataset_shard``.
def train_func(config):
    train_data_shard = session.get_dataset_shard("train")
    validation_data_shard = session.get_dataset_shard("validation")
    train_rows = sum(len(b["x"]) for b in train_data_shard.iter_batches(batch_size=16))
    validation_rows = sum(
        len(b["x"]) for b in validation_data_shard.iter_batches(batch_size=16)
    )
    session.report({"train_rows": train_rows, "validation_rows": validation_rows})


# Random split the dataset into 80% training data and 20% validation data.
dataset = ray.data.from_items([{"x": float(i), "y": 2.0 * i} for i in range(100)])
train_dataset, validation_dataset = dataset.train_test_split(
    test_size=0.2, shuffle=True,
)

trainer = TorchTrainer(
    train_func,
    datasets={"train": train_dataset, "validation": validation_dataset},
    scaling_config=ScalingConfig(num_workers=2),
)
result = trainer.fit()
print(result.metrics["train_rows"], result.metrics["validation_rows"])
# 40 10

# Both datasets are split across the 2 workers (DataConfig's default).
assert result.metrics["train_rows"] == 40
assert result.metrics["validation_rows"] == 10
