"""Porting a PyTorch training loop: ``prepare_model`` and ``prepare_data_loader``.

From the seed pages train-porting-code.rst ("Updating your training function",
"Creating a TorchTrainer", "Running your training function") and train-dl-guide.rst
("Porting code to Ray Train", PyTorch tabs). The loop trains a small network on a
synthetic regression dataset; ``TorchConfig`` customizes the process group.
"""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import engine
import engine.torch
from engine import ScalingConfig
from engine.torch import TorchConfig, TorchTrainer


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Linear(8, 16)
        self.relu = nn.ReLU()
        self.layer2 = nn.Linear(16, 1)

    def forward(self, x):
        return self.layer2(self.relu(self.layer1(x)))


def train_func(config):
    # A synthetic dataset: y = sum(x) + noise.
    generator = torch.Generator().manual_seed(0)
    X = torch.randn(512, 8, generator=generator)
    Y = X.sum(dim=1, keepdim=True) + 0.1 * torch.randn(512, 1, generator=generator)
    my_dataset = TensorDataset(X, Y)

    # Create model.
    model = NeuralNetwork()
    model = engine.torch.prepare_model(model)

    worker_batch_size = config["worker_batch_size"]
    data_loader = DataLoader(my_dataset, batch_size=worker_batch_size, shuffle=True)
    data_loader = engine.torch.prepare_data_loader(data_loader)
    global_batch_size = worker_batch_size * engine.world_size()

    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(config["num_epochs"]):
        total, batches = 0.0, 0
        for X, y in data_loader:
            loss = loss_fn(model(X), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
        engine.session.report({"epoch": epoch, "loss": total / batches, "batches": batches,
                               "global_batch_size": global_batch_size})


# For GPU Training, set `use_gpu` to True.
use_gpu = False
trainer = TorchTrainer(
    train_func,
    train_loop_config={"num_epochs": 5, "worker_batch_size": 32},
    torch_backend=TorchConfig(backend="gloo"),
    scaling_config=ScalingConfig(use_gpu=use_gpu, num_workers=2),
)
result = trainer.fit()
print(result.metrics_dataframe[["epoch", "loss"]])

losses = list(result.metrics_dataframe["loss"])
assert result.metrics["epoch"] == 4
assert result.metrics["global_batch_size"] == 64
# The DistributedSampler gives each of the 2 workers half of the 512 samples.
assert result.metrics["batches"] == 256 // 32
assert losses[-1] < losses[0] / 2, losses
