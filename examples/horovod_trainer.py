"""HorovodTrainer with a Ray Dataset: ``hvd.init()``, ``hvd.DistributedOptimizer``.

From the seed page air-trainers.rst, section "Distributed Dataparallel Training"
(Horovod tab, ``examples/hvd_trainer.py``). The seed uses 3 workers; this uses 2.
Horovod itself is installed by ``make test`` (``bash scripts/install_horovod.sh
.venv/bin/python``); without it ``HorovodTrainer`` raises ImportError naming that command.
"""

import ray
import torch
import torch.nn as nn

from engine import Checkpoint, ScalingConfig, session
from engine.horovod import HorovodTrainer
from engine.runtime import ensure_ray

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
    import horovod.torch as hvd  # on the workers; HorovodTrainer checks it is installed

    hvd.init()
    dataset_shard = session.get_dataset_shard("train")
    torch.manual_seed(0)  # the same start on every run (rank 0's weights are broadcast)
    model = NeuralNetwork()
    loss_fn = nn.MSELoss()
    lr_scaler = 1
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * lr_scaler)
    # Horovod: every rank starts from rank 0's weights; gradients are averaged.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        op=hvd.Average,
    )
    for epoch in range(num_epochs):
        model.train()
        epoch_loss, batches = 0.0, 0
        for batch in dataset_shard.iter_torch_batches(batch_size=32, dtypes=torch.float):
            inputs, labels = torch.unsqueeze(batch["x"], 1), batch["y"].unsqueeze(1)
            outputs = model(inputs)
            loss = loss_fn(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
            batches += 1
            print(f"epoch: {epoch}, loss: {loss.item()}")

        session.report(
            {"epoch": epoch, "loss": epoch_loss / batches, "world_size": hvd.size()},
            checkpoint=Checkpoint.from_dict(dict(epoch=epoch, model=model.state_dict())),
        )


# Inputs in [0, 1) keep SGD with lr=0.1 stable.
train_dataset = ray.data.from_items([{"x": x / 200, "y": 2 * x / 200 + 1} for x in range(200)])
scaling_config = ScalingConfig(num_workers=2)
# If using GPUs, use the below scaling config instead.
# scaling_config = ScalingConfig(num_workers=2, use_gpu=True)
trainer = HorovodTrainer(
    train_loop_per_worker=train_loop_per_worker,
    scaling_config=scaling_config,
    datasets={"train": train_dataset},
)
result = trainer.fit()
print(result.checkpoint.to_dict()["epoch"])
# 2

assert result.checkpoint.to_dict()["epoch"] == num_epochs - 1
assert result.metrics["world_size"] == 2
history = result.metrics_dataframe["loss"].tolist()
assert history[-1] < history[0], history  # it learned
