"""AccelerateTrainer: a training function written with Hugging Face Accelerate.

From the seed page train-porting-code.rst, section "AccelerateTrainer"
(``doc_code/accelerate_trainer.py``). The seed uses 3 workers; this uses 2, and scales
the inputs to [0, 1) so that SGD with lr=0.1 stays stable.
"""

import ray
import torch
import torch.nn as nn
from accelerate import Accelerator

from engine import Checkpoint, ScalingConfig, session
from engine.huggingface import AccelerateTrainer
from engine.runtime import ensure_ray

# Start Ray before creating datasets, as fit() would: the cluster in RAY_ADDRESS, else a
# local Ray with at least 4 logical CPUs (TRAINYARD_RAY_NUM_CPUS). ray.data would
# otherwise start one with a CPU per core, and on a 2-core machine the 2 workers would
# leave none for reading.
ensure_ray()

# If using GPUs, set this to True.
use_gpu = False

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
    accelerator = Accelerator()
    dataset_shard = session.get_dataset_shard("train")
    model = NeuralNetwork()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    model, optimizer = accelerator.prepare(model, optimizer)

    for epoch in range(num_epochs):
        for batches in dataset_shard.iter_torch_batches(
            batch_size=32, dtypes=torch.float, device=accelerator.device
        ):
            inputs, labels = torch.unsqueeze(batches["x"], 1), batches["y"]
            output = model(inputs)
            loss = loss_fn(output, labels.unsqueeze(1))
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            print(f"epoch: {epoch}, loss: {loss.item()}")

        session.report(
            {"epoch": epoch, "loss": loss.item()},
            checkpoint=Checkpoint.from_dict(
                dict(epoch=epoch, model=accelerator.unwrap_model(model).state_dict())
            ),
        )


train_dataset = ray.data.from_items([{"x": x / 200, "y": 2 * x / 200 + 1} for x in range(200)])
scaling_config = ScalingConfig(num_workers=2, use_gpu=use_gpu)
trainer = AccelerateTrainer(
    train_loop_per_worker=train_loop_per_worker,
    # Instead of using a dict, you can run ``accelerate config``.
    # The default value of None will then load that configuration
    # file.
    accelerate_config={},
    scaling_config=scaling_config,
    datasets={"train": train_dataset},
)
result = trainer.fit()

print(result.metrics["loss"], result.checkpoint.to_dict()["epoch"])
assert result.checkpoint.to_dict()["epoch"] == num_epochs - 1
assert result.metrics["loss"] < 0.5, result.metrics
# The checkpoint holds the plain (unwrapped) model's weights.
model = NeuralNetwork()
model.load_state_dict(result.checkpoint.to_dict()["model"])
