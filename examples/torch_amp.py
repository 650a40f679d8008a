"""Automatic Mixed Precision with ``accelerate(amp=True)``.

From the seed page train-dl-guide.rst, section "Automatic Mixed Precision" (PyTorch tab).
On CPU, AMP autocasts to bfloat16 and needs no gradient scaler; on a GPU it uses
float16 with a GradScaler behind ``prepare_optimizer`` and ``backward``.
"""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import engine
import engine.torch
from engine import ScalingConfig
from engine.torch import TorchTrainer


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Linear(16, 32)
        self.relu = nn.ReLU()
        self.layer2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.layer2(self.relu(self.layer1(x)))


def train_func():
    engine.torch.accelerate(amp=True)

    generator = torch.Generator().manual_seed(0)
    images = torch.randn(256, 16, generator=generator)
    targets = images[:, :4].argmax(dim=1)
    my_dataset = TensorDataset(images, targets)

    model = NeuralNetwork()
    # Record the dtype the first linear layer computes in.
    seen = {}
    model.layer1.register_forward_hook(lambda m, i, out: seen.update(dtype=str(out.dtype)))
    model = engine.torch.prepare_model(model)

    data_loader = DataLoader(my_dataset, batch_size=32)
    data_loader = engine.torch.prepare_data_loader(data_loader)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer = engine.torch.prepare_optimizer(optimizer)

    model.train()
    for epoch in range(5):
        for images, targets in data_loader:
            optimizer.zero_grad()

            outputs = model(images)
            loss = torch.nn.functional.cross_entropy(outputs, targets)

            engine.torch.backward(loss)
            optimizer.step()
        engine.session.report({"epoch": epoch, "loss": loss.item(),
                               "layer_dtype": seen["dtype"],
                               "output_dtype": str(outputs.dtype)})


trainer = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2))
result = trainer.fit()
print(result.metrics["layer_dtype"], result.metrics["output_dtype"], result.metrics["loss"])
# torch.bfloat16 torch.float32 0.9...

expected = "torch.float16" if engine.torch.get_device().type == "cuda" else "torch.bfloat16"
assert result.metrics["layer_dtype"] == expected, result.metrics["layer_dtype"]
assert result.metrics["output_dtype"] == "torch.float32"
losses = list(result.metrics_dataframe["loss"])
assert losses[-1] < losses[0], losses
