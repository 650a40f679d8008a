"""Real TensorFlow on 2 workers: MultiWorkerMirroredStrategy over TF_CONFIG, Keras 2,
ReportCheckpointCallback, Ray Data shards through to_tf, Keras file checkpoints,
resume, and prediction from the checkpoint.

The seed's dict-checkpoint save and resume examples run as examples/tf_checkpoint_*.py
(tests/integration/test_examples.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os

import pytest

from engine import DataConfig, RunConfig, ScalingConfig

# The fits run on warm pooled workers (tests/README.md, "How a new test pays for
# itself"): a TensorFlow worker's import alone is about 7 CPU-s.
pytestmark = [pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("tf_keras")
    is None, reason="needs TensorFlow and tf-keras: pip install 'trainyard[tensorflow]'"),
    pytest.mark.usefixtures("pooled_workers")]


@pytest.fixture(scope="module")
def driver_tf():
    """TensorFlow imported in this process (prediction, reading checkpoints) before the
    per-test environment snapshot: importing it sets a few variables once per process."""
    import tensorflow
    import tf_keras  # noqa: F401

    return tensorflow


def _weights_sha(model) -> str:
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(w.tobytes())
    return h.hexdigest()[:16]


def _info_callback(strategy, extra=None):
    """A Keras callback that adds what the tests check to the epoch logs, ahead of
    ReportCheckpointCallback (Keras hands every callback the same logs dict): the
    weights' digest, the strategy's replicas, TF_CONFIG, the Keras package, the number
    of training steps this epoch."""
    import tensorflow as tf

    class Info(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.steps = 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1

        def on_epoch_end(self, epoch, logs=None):
            logs["weights_sha"] = _weights_sha(self.model)
            logs["replicas"] = strategy.num_replicas_in_sync
            logs["tf_config"] = os.environ.get("TF_CONFIG", "")
            logs["keras_module"] = type(self.model).__module__.split(".")[0]
            logs["steps"] = self.steps
            logs.update(extra or {})

    return Info()


# --- digits: Ray Data shards → to_tf → Keras under MultiWorkerMirroredStrategy ----------
def _digits_train_func(config):
    import tensorflow as tf

    import engine
    from engine.tensorflow import ReportCheckpointCallback, to_tf

    # Different seeds per rank: identical weights afterwards show the strategy's work
    # (initial values broadcast from worker 0, gradients all-reduced every step).
    tf.keras.utils.set_random_seed(engine.get_context().get_world_rank())
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(64, activation="relu", input_shape=(64,)),
            tf.keras.layers.Dense(10)])
        model.compile(optimizer=tf.keras.optimizers.Adam(config["lr"]),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    train = to_tf(engine.get_dataset_shard("train"), "x", "y",
                  worker_batch_size=config["batch_size"])
    val = to_tf(engine.get_dataset_shard("validation"), "x", "y",
                worker_batch_size=config["batch_size"])
    # The same shard read directly, as dicts of tf.Tensors.
    train_rows = sum(int(b["y"].shape[0]) for b in
                     engine.get_dataset_shard("train").iter_tf_batches(batch_size=128))
    model.fit(train, validation_data=val, epochs=config["epochs"], verbose=0,
              callbacks=[_info_callback(strategy, {"train_rows": train_rows}),
                         ReportCheckpointCallback()])


def test_digits_mwms_two_workers_accuracy_identical_weights_and_predictor(
        ray_start_4_cpus, storage_path, driver_tf):
    import numpy as np

    from engine.predict import evaluate
    from pipelines import digits

    epochs, batch_size = 6, 32
    from engine.tensorflow import TensorflowPredictor, TensorflowTrainer

    result = TensorflowTrainer(
        _digits_train_func,
        train_loop_config={"lr": 3e-3, "batch_size": batch_size, "epochs": epochs},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage_path),
        datasets=digits.digits_datasets(),
        dataset_config=DataConfig(datasets_to_split=["train"]),
        metadata={"feature_columns": ["x"], "label_column": "y"},
    ).fit()

    m = result.metrics
    assert m["val_accuracy"] >= 0.90, m
    assert m["epoch"] == epochs - 1 and m["training_iteration"] == epochs
    # One strategy over both workers, each at its own address; Keras 2 (tf-keras).
    assert m["replicas"] == 2
    cluster = json.loads(m["tf_config"])["cluster"]["worker"]
    assert len(cluster) == len(set(cluster)) == 2
    assert m["keras_module"] == "tf_keras"
    # Each worker read its half of the training set. The tf.data batch is the global
    # batch (batch_size × 2 workers); each step, each worker trains on batch_size rows of
    # its own shard, so an epoch is 2 steps per global batch of the shard.
    X_train, _, X_val, y_val = digits.load_digits_split()
    shard_rows = len(X_train) // 2
    assert m["train_rows"] == shard_rows
    assert m["steps"] == 2 * -(-shard_rows // (2 * batch_size))

    workers = result.worker_metrics_dataframe
    assert sorted(workers["rank"].unique()) == [0, 1]
    for _, rows in workers.groupby("training_iteration"):
        assert rows["weights_sha"].nunique() == 1, rows[["rank", "weights_sha"]]
    assert workers["weights_sha"].nunique() == epochs  # they changed every epoch

    # The checkpoint is rank 0's Keras file; prediction picks TensorflowPredictor from
    # the model card and reaches the accuracy the workers reported.
    assert "model.keras" in os.listdir(result.checkpoint.path)
    assert result.checkpoint.get_model_card()["framework"] == "tensorflow"
    import pandas as pd

    val_df = pd.DataFrame({"x": list(X_val), "y": y_val})
    scores = evaluate(result.checkpoint, val_df)
    assert scores["accuracy"] == pytest.approx(m["val_accuracy"], abs=1e-6)
    preds = TensorflowPredictor.from_checkpoint(result.checkpoint).predict(val_df)
    assert np.stack(preds["predictions"]).shape == (len(X_val), 10)


# --- a Keras file checkpoint: 1 worker (MirroredStrategy) → resumed on 2 (MWMS) -----------
def _keras_file_train_func(config):
    import numpy as np
    import tensorflow as tf

    import engine
    from engine.tensorflow import ReportCheckpointCallback, TensorflowCheckpoint

    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 4)).astype("float32")
    Y = X @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32") + 0.25
    strategy = (tf.distribute.MirroredStrategy() if config["strategy"] == "mirrored"
                else tf.distribute.MultiWorkerMirroredStrategy())
    start_epoch, restored = 0, ""
    checkpoint = engine.get_checkpoint()
    tf.keras.utils.set_random_seed(0)  # the same shuffles whether resumed or not
    with strategy.scope():
        if checkpoint:
            model = TensorflowCheckpoint.wrap(checkpoint).get_model()
            start_epoch = checkpoint.metrics["epoch"] + 1
            restored = _weights_sha(model)
        else:
            model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
            model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="mse")
    model.fit(X, Y, batch_size=16, epochs=config["num_epochs"], initial_epoch=start_epoch,
              verbose=0, callbacks=[_info_callback(strategy, {"restored_sha": restored}),
                                    ReportCheckpointCallback()])


def test_keras_file_checkpoint_mirrored_then_resumed_on_two_workers(
        ray_start_4_cpus, storage_path, driver_tf):
    from engine.tensorflow import TensorflowCheckpoint, TensorflowConfig, TensorflowTrainer

    first = TensorflowTrainer(
        _keras_file_train_func, train_loop_config={"strategy": "mirrored", "num_epochs": 2},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(storage_path=storage_path),
        tensorflow_backend=TensorflowConfig(),  # the seed's older argument name
    ).fit()
    assert first.metrics["epoch"] == 1 and first.metrics["replicas"] == 1
    saved_sha = first.metrics["weights_sha"]
    assert sorted(f for f in os.listdir(first.checkpoint.path)
                  if not f.startswith(".")) == ["model.keras", "model_card.json"]

    second = TensorflowTrainer(
        _keras_file_train_func, train_loop_config={"strategy": "mwms", "num_epochs": 5},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage_path),
        resume_from_checkpoint=first.checkpoint,
    ).fit()
    m = second.metrics
    # Epochs 2, 3 and 4 only, on both workers, starting from the saved weights with the
    # optimizer state of the file (the loss keeps falling from where it was).
    assert m["epoch"] == 4 and m["training_iteration"] == 3 and m["replicas"] == 2
    assert m["restored_sha"] == saved_sha
    assert second.metrics_dataframe["loss"].iloc[0] < first.metrics["loss"]
    model = TensorflowCheckpoint.wrap(second.checkpoint).get_model()
    assert _weights_sha(model) == m["weights_sha"]
