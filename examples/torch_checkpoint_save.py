"""Saving checkpoints (PyTorch): report model weights as a checkpoint each epoch.

From the seed page train-dl-guide.rst, section "Logging, Checkpointing and Callbacks" >
"Saving checkpoints" (PyTorch tab), and the ``get_internal_representation()`` snippet
that follows it.
"""

import numpy as np
import torch
import torch.nn as nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.optim import Adam

import engine.torch
from engine import Checkpoint, ScalingConfig, session
from engine.torch import TorchTrainer


def train_func(config):
    n = 100
    # create a toy dataset
    # data   : X - dim = (n, 4)
    # target : Y - dim = (n, 1)
    X = torch.Tensor(np.random.normal(0, 1, size=(n, 4)))
    Y = torch.Tensor(np.random.uniform(0, 1, size=(n, 1)))
    # toy neural network : 1-layer
    # wrap the model in DDP
    model = engine.torch.prepare_model(nn.Linear(4, 1))
    criterion = nn.MSELoss()

    optimizer = Adam(model.parameters(), lr=3e-4)
    for epoch in range(config["num_epochs"]):
        y = model.forward(X)
        # compute loss
        loss = criterion(y, Y)
        # back-propagate loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # To fetch non-DDP state_dict
        # w/o DDP: model.state_dict()
        # w/  DDP: model.module.state_dict()
        state_dict = model.state_dict()
        consume_prefix_in_state_dict_if_present(state_dict, "module.")
        checkpoint = Checkpoint.from_dict(
            dict(epoch=epoch, model_weights=state_dict)
        )
        session.report({}, checkpoint=checkpoint)


trainer = TorchTrainer(
    train_func,
    train_loop_config={"num_epochs": 5},
    scaling_config=ScalingConfig(num_workers=2),
)
result = trainer.fit()

print(result.checkpoint.to_dict())
# {'epoch': 4, 'model_weights': OrderedDict([('weight', tensor([[...]])), ('bias', tensor([...]))])}

# By default, checkpoints are persisted in the run directory.
print(result.checkpoint.get_internal_representation())
# ('local_path', '/home/ubuntu/trainyard_results/TorchTrainer_.../checkpoint_000004')

state = result.checkpoint.to_dict()
assert state["epoch"] == 4
assert sorted(state["model_weights"]) == ["bias", "weight"]
kind, path = result.checkpoint.get_internal_representation()
assert kind in ("local_path", "uri") and path.rstrip("/").endswith("checkpoint_000004")
