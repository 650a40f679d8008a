"""Logging to MLflow and TensorBoard.

From the seed page train-dl-guide.rst, section "Example: Logging to MLflow and
TensorBoard" (``mlflow_simple_example.py``). Needs ``pip install 'trainyard[tracking]'``
(mlflow and tensorboardX).

The seed lets MLflow use its default store in the working directory; this script puts
the MLflow store (a sqlite database) in the run storage instead, so running it leaves
nothing behind in the checkout.
"""

import os
import tempfile

from engine import RunConfig, ScalingConfig, session
from engine.callbacks import MLflowLoggerCallback, TensorBoardLoggerCallback
from engine.torch import TorchTrainer


def train_func():
    for i in range(3):
        session.report(dict(epoch=i))


mlflow_dir = tempfile.mkdtemp(prefix="mlflow_",
                              dir=os.environ.get("TRAINYARD_STORAGE_PATH") or None)
tracking_uri = f"sqlite:///{os.path.join(mlflow_dir, 'mlflow.db')}"

trainer = TorchTrainer(
    train_func,
    scaling_config=ScalingConfig(num_workers=2),
    run_config=RunConfig(
        callbacks=[
            MLflowLoggerCallback(tracking_uri=tracking_uri,
                                 experiment_name="train_experiment",
                                 artifact_location=os.path.join(mlflow_dir, "artifacts")),
            TensorBoardLoggerCallback(),
        ],
    ),
)

# Run the training function, logging all the intermediate results
# to MLflow and Tensorboard.
result = trainer.fit()

# For MLflow logs:
#   $ mlflow ui --backend-store-uri <tracking_uri>
# and open localhost:5000.
print("MLflow tracking URI:", tracking_uri)

# For TensorBoard logs: the event files are in the run directory.
#   $ tensorboard --logdir <run directory>
print("Run directory:", result.log_dir)

# Check what was logged.
from mlflow.tracking import MlflowClient  # noqa: E402

client = MlflowClient(tracking_uri=tracking_uri)
experiment = client.get_experiment_by_name("train_experiment")
(run,) = client.search_runs([experiment.experiment_id])
assert run.info.status == "FINISHED"
history = client.get_metric_history(run.info.run_id, "epoch")
assert sorted((m.step, m.value) for m in history) == [(1, 0.0), (2, 1.0), (3, 2.0)]
assert any(name.startswith("events.out.tfevents") for name in os.listdir(result.log_dir))
