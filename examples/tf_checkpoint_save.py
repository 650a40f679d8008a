"""Saving checkpoints (TensorFlow): report Keras weights as a checkpoint each epoch.

From the seed page train-dl-guide.rst, section "Logging, Checkpointing and Callbacks" >
"Saving checkpoints" (TensorFlow tab), and the ``get_internal_representation()`` snippet
that follows it. TensorflowTrainer sets ``TF_CONFIG`` in each worker, so the strategy
connects both; ``tf.keras`` there is Keras 2 (tf-keras).
"""

import numpy as np

from engine import Checkpoint, ScalingConfig, session
from engine.tensorflow import TensorflowTrainer


def train_func(config):
    import tensorflow as tf
    n = 100
    # create a toy dataset
    # data   : X - dim = (n, 4)
    # target : Y - dim = (n, 1)
    X = np.random.normal(0, 1, size=(n, 4))
    Y = np.random.uniform(0, 1, size=(n, 1))

    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
    with strategy.scope():
        # toy neural network : 1-layer
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, activation="linear", input_shape=(4,))])
        model.compile(optimizer="Adam", loss="mean_squared_error", metrics=["mse"])

    for epoch in range(config["num_epochs"]):
        model.fit(X, Y, batch_size=20, verbose=0)
        checkpoint = Checkpoint.from_dict(
            dict(epoch=epoch, model_weights=model.get_weights())
        )
        session.report({}, checkpoint=checkpoint)


trainer = TensorflowTrainer(
    train_func,
    train_loop_config={"num_epochs": 5},
    scaling_config=ScalingConfig(num_workers=2),
)
result = trainer.fit()

print(result.checkpoint.to_dict())
# {'epoch': 4, 'model_weights': [array([[-0.31858477],
#    [ 0.03747174],
#    [ 0.28266194],
#    [ 0.8626015 ]], dtype=float32), array([0.02230084], dtype=float32)]}

# By default, checkpoints are persisted in the run directory.
print(result.checkpoint.get_internal_representation())
# ('local_path', '/home/ubuntu/trainyard_results/TensorflowTrainer_.../checkpoint_000004')

state = result.checkpoint.to_dict()
assert state["epoch"] == 4
assert [w.shape for w in state["model_weights"]] == [(4, 1), (1,)]
kind, path = result.checkpoint.get_internal_representation()
assert kind in ("local_path", "uri") and path.rstrip("/").endswith("checkpoint_000004")
