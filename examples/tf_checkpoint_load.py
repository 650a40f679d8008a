"""Loading checkpoints (TensorFlow): resume training from ``get_checkpoint()``.

From the seed page train-dl-guide.rst, section "Logging, Checkpointing and Callbacks" >
"Loading checkpoints" (TensorFlow tab): train 2 epochs, then pass ``result.checkpoint``
as ``resume_from_checkpoint`` to a run of 5 epochs, which goes on at epoch 2 and ends
at 4.
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

    start_epoch = 0
    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()

    with strategy.scope():
        # toy neural network : 1-layer
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, activation="linear", input_shape=(4,))])
        checkpoint = session.get_checkpoint()
        if checkpoint:
            # assume that we have run the session.report() example
            # and successfully save some model weights
            checkpoint_dict = checkpoint.to_dict()
            model.set_weights(checkpoint_dict.get("model_weights"))
            start_epoch = checkpoint_dict.get("epoch", -1) + 1
        model.compile(optimizer="Adam", loss="mean_squared_error", metrics=["mse"])

    for epoch in range(start_epoch, config["num_epochs"]):
        model.fit(X, Y, batch_size=20, verbose=0)
        checkpoint = Checkpoint.from_dict(
            dict(epoch=epoch, model_weights=model.get_weights())
        )
        session.report({}, checkpoint=checkpoint)


trainer = TensorflowTrainer(
    train_func,
    train_loop_config={"num_epochs": 2},
    scaling_config=ScalingConfig(num_workers=2),
)
# save a checkpoint
result = trainer.fit()
assert result.checkpoint.to_dict()["epoch"] == 1
saved_weights = result.checkpoint.to_dict()["model_weights"]

# load a checkpoint
trainer = TensorflowTrainer(
    train_func,
    train_loop_config={"num_epochs": 5},
    scaling_config=ScalingConfig(num_workers=2),
    resume_from_checkpoint=result.checkpoint,
)
result = trainer.fit()

print(result.checkpoint.to_dict())
# {'epoch': 4, 'model_weights': [array([[-0.70056134],
#    [-0.8839263 ],
#    [-1.0043601 ],
#    [-0.61634773]], dtype=float32), array([0.01889327], dtype=float32)]}

state = result.checkpoint.to_dict()
assert state["epoch"] == 4
# The resumed run trained epochs 2, 3 and 4 only: three reports, from the saved weights.
assert result.metrics["training_iteration"] == 3
assert [w.shape for w in state["model_weights"]] == [w.shape for w in saved_weights]
assert any((a != b).any() for a, b in zip(state["model_weights"], saved_weights))
