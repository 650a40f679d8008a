"""Ray Data datasets created before fit() (issue 23, gap 9; issue 44): engine.data.read_csv
starts Ray as fit() would (at least 4 logical CPUs, as trainyard starts it), not with one
CPU per core as Ray Data's own ray.init() does, so a trainer asking for 2 CPUs on each
of 2 workers fits on a 2-core machine; when the workers take every CPU, the data is
read into the object store first (and the log says so).

Ported from Ray by rewriting imports only: ray.data -> engine.data, ray.train -> engine.
"""

import logging
import os
import tempfile

import pandas as pd

import engine.data
import engine as train
from engine import ConfigError, RunConfig, ScalingConfig
from engine.torch import TorchTrainer


class Messages(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


messages = Messages()
logging.getLogger("engine").addHandler(messages)
logging.getLogger("engine").setLevel(logging.INFO)

csv = os.path.join(tempfile.mkdtemp(), "rows.csv")
pd.DataFrame({"x": range(100), "y": [i % 2 for i in range(100)]}).to_csv(csv, index=False)
train_ds = engine.data.read_csv(csv)             # Ray starts here, one CPU per core
valid_ds = engine.data.read_csv(csv).limit(10)


def train_func(config):
    shard = train.get_dataset_shard("train")
    rows = sum(len(b["x"]) for b in shard.iter_batches(batch_size=16))
    valid = sum(len(b["x"]) for b in train.get_dataset_shard("valid").iter_batches())
    train.report({"rows": rows, "valid": valid})


def fit(scaling):
    trainer = TorchTrainer(train_func, scaling_config=scaling,
                           datasets={"train": train_ds, "valid": valid_ds},
                           run_config=RunConfig(verbose=0))
    result = trainer.fit()
    ranks = [result.metrics] + [r for rows in result.worker_history for r in rows]
    assert [m["rows"] for m in ranks] == [50, 50], ranks
    assert [m["valid"] for m in ranks] == [5, 5], ranks  # Ray splits every dataset
    return result


started = [m for m in messages.lines if m.startswith("Starting a local Ray instance")]
assert started and int(started[0].split()[-3]) >= 4, messages.lines  # as fit() starts it
result = fit(ScalingConfig(num_workers=2))  # 2 of the 4 CPUs or more: Ray Data streams
# Two CPUs on each of two workers, the case: it fits, and when the workers take
# every CPU (a 2-core machine's 4 logical ones) the data is read before they start.
fit(ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2}))
if max(4, os.cpu_count() or 1) <= 4:
    assert any("read into the object store" in m for m in messages.lines), messages.lines

# Trainer.restore: Ray Datasets are not stored with the trainer, so they are passed again.
assert TorchTrainer.can_restore(result.path)
try:
    TorchTrainer.restore(result.path)
    raise AssertionError("restore without the in-memory datasets must say which")
except ConfigError as exc:
    assert "'train'" in str(exc) and "'valid'" in str(exc), exc
restored = TorchTrainer.restore(result.path, datasets={"train": train_ds, "valid": valid_ds})
again = restored.fit()  # the run finished: its result comes back, nothing runs again
assert again.metrics["rows"] == 50 and again.path == result.path
print("OK")
