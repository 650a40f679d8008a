"""TensorflowTrainer with a Ray Dataset: ``to_tf``, ``ReportCheckpointCallback`` and
prediction from the checkpoint.

From the seed page air-trainers.rst, section "Distributed Dataparallel Training"
(Tensorflow tab, ``examples/tf_starter.py``: a small Keras regression of
``y = 2x + 1`` on a Ray Dataset), with the porting guide's two steps
(train-dl-guide.rst, "Update training function", TensorFlow tab): build and compile the
model in ``MultiWorkerMirroredStrategy().scope()``, and batch the dataset by the
*global* batch size, ``worker_batch_size * world_size``.
"""

import pandas as pd
import ray

from engine import ScalingConfig, session
from engine.runtime import ensure_ray
from engine.tensorflow import TensorflowConfig, TensorflowPredictor, TensorflowTrainer

# Start Ray before creating datasets, as fit() would: the cluster in RAY_ADDRESS, else a
# local Ray with at least 4 logical CPUs (TRAINYARD_RAY_NUM_CPUS). ray.data would
# otherwise start one with a CPU per core, and on a 2-core machine the 2 workers would
# leave none for reading.
ensure_ray()


def build_model():
    import tensorflow as tf

    return tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=()),
        # Add feature dimension, expanding (batch_size,) to (batch_size, 1).
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(10),
        tf.keras.layers.Dense(1),
    ])


def train_func(config: dict):
    import tensorflow as tf

    from engine.tensorflow import ReportCheckpointCallback, to_tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        # Model building/compiling need to be within `strategy.scope()`.
        multi_worker_model = build_model()
        multi_worker_model.compile(
            optimizer=tf.keras.optimizers.Adam(learning_rate=config["lr"]),
            loss=tf.keras.losses.mean_squared_error,
            metrics=[tf.keras.metrics.mean_squared_error],
        )

    # This worker's shard, batched by the global batch size (each step, every worker
    # trains on `batch_size` rows of its own shard).
    tf_dataset = to_tf(session.get_dataset_shard("train"), feature_columns="x",
                       label_columns="y",
                       batch_size=config["batch_size"] * session.get_world_size())
    # Reports the Keras logs and saves the model (model.keras) after every epoch.
    multi_worker_model.fit(tf_dataset, epochs=config["epochs"], verbose=0,
                           callbacks=[ReportCheckpointCallback()])


train_dataset = ray.data.from_items([{"x": x / 200, "y": 2 * x / 200 + 1} for x in range(200)])
trainer = TensorflowTrainer(
    train_loop_per_worker=train_func,
    train_loop_config={"lr": 0.05, "batch_size": 16, "epochs": 5},
    scaling_config=ScalingConfig(num_workers=2),
    datasets={"train": train_dataset},
    tensorflow_config=TensorflowConfig(),  # the default: TF_CONFIG, Keras 2 in the workers
)
result = trainer.fit()
print(result.metrics["loss"], result.metrics["epoch"])
# 0.0021... 4

# The checkpoint holds the Keras model file; the predictor rebuilds it (no pickle).
predictor = TensorflowPredictor.from_checkpoint(result.checkpoint)
predictions = predictor.predict(pd.DataFrame({"x": [0.25, 0.75]}))
print(predictions)
#    predictions
# 0     1.49...
# 1     2.50...

losses = result.metrics_dataframe["loss"]
assert result.metrics["epoch"] == 4 and len(losses) == 5
assert losses.iloc[-1] < losses.iloc[0]
assert abs(predictions["predictions"] - pd.Series([1.5, 2.5])).max() < 0.5
