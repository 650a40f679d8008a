"""TorchTrainer with a Ray Dataset: ``get_dataset_shard`` and ``iter_torch_batches``.

From the seed page air-trainers.rst, section "Distributed Dataparallel Training"
(Torch tab, ``examples/torch_trainer.py``). The seed uses 3 workers; this uses 2.
"""

import ray
import torch
import torch.nn as nn

import engine.torch
from engine import Checkpoint, ScalingConfig, session
from engine.runtime import ensure_ray
from engine.torch import TorchTrainer

# Start Ray before creating datasets, as fit() would: the cluster in RAY_ADDRESS, else a
# local Ray with at least 4 logical CPUs (TRAINYARD_RAY_NUM_CPUS). ray.data would
# otherwise start one with a CPU per core, and on a 2-core machine the 2 workers would
# leave none for reading.
ensure_ray()

input_size = 1
layer_size = 15
output_size = 1
num_epochs = 3


class NeuralNetwork(nn.Module):
    def __init__(self):
        super(NeuralNetwork, self).__init__()
        self.layer1 = nn.Linear(input_size, layer_size)
        self.relu = nn.ReLU()
        self.layer2 = nn.Linear(layer_size, output_size)

    def forward(self, input):
        return self.layer2(self.relu(self.layer1(input)))


def train_loop_per_worker():
    dataset_shard = session.get_dataset_shard("train")
    model = NeuralNetwork()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    model = engine.torch.prepare_model(model)

    for epoch in range(num_epochs):
        rows = 0
        for batches in dataset_shard.iter_torch_batches(
            batch_size=32, dtypes=torch.float
        ):
            inputs, labels = torch.unsqueeze(batches["x"], 1), batches["y"]
            output = model(inputs)
            loss = loss_fn(output, labels.unsqueeze(1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            rows += len(labels)
            print(f"epoch: {epoch}, loss: {loss.item()}")

        session.report(
            {"epoch": epoch, "rows": rows},
            checkpoint=Checkpoint.from_dict(
                dict(epoch=epoch, model=model.state_dict())
            ),
        )


# Inputs in [0, 1) keep SGD with lr=0.1 stable.
train_dataset = ray.data.from_items([{"x": x / 200, "y": 2 * x / 200 + 1} for x in range(200)])
scaling_config = ScalingConfig(num_workers=2)
# If using GPUs, use the below scaling config instead.
# scaling_config = ScalingConfig(num_workers=2, use_gpu=True)
trainer = TorchTrainer(
    train_loop_per_worker=train_loop_per_worker,
    scaling_config=scaling_config,
    datasets={"train": train_dataset},
)
result = trainer.fit()
print(result.checkpoint.to_dict()["epoch"])
# 2

assert result.checkpoint.to_dict()["epoch"] == num_epochs - 1
# Each of the 2 workers reads its half of the 200 rows every epoch.
assert result.metrics["rows"] == 100
