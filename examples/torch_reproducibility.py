"""Reproducibility with ``enable_reproducibility()``: two runs, identical weights.

From the seed page train-dl-guide.rst, section "Reproducibility" (PyTorch tab). As the
seed warns, this limits nondeterminism; it cannot make different hardware or library
versions agree.
"""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import engine.torch
from engine import Checkpoint, ScalingConfig, session
from engine.torch import TorchTrainer


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Linear(8, 16)
        self.relu = nn.ReLU()
        self.layer2 = nn.Linear(16, 1)

    def forward(self, x):
        return self.layer2(self.relu(self.layer1(x)))


def train_func():
    engine.torch.enable_reproducibility()

    model = NeuralNetwork()
    model = engine.torch.prepare_model(model)

    X = torch.randn(256, 8)
    Y = torch.randn(256, 1)
    data_loader = DataLoader(TensorDataset(X, Y), batch_size=16, shuffle=True)
    data_loader = engine.torch.prepare_data_loader(data_loader)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(3):
        for x, y in data_loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    state_dict = {k.removeprefix("module."): v for k, v in model.state_dict().items()}
    session.report({"loss": loss.item()},
                   checkpoint=Checkpoint.from_dict(dict(model_weights=state_dict)))


def run():
    trainer = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2))
    return trainer.fit().checkpoint.to_dict()["model_weights"]


first, second = run(), run()
same = all(torch.equal(first[k], second[k]) for k in first)
print("identical weights:", same)
# identical weights: True

assert first.keys() == second.keys()
assert same
