"""The seed pages' spellings (issue 23, gap 11): HorovodTrainer(tensorflow_backend=
HorovodConfig()), the older automatic result fields, prepare_model(parallel_strategy=
"fsdp") and get_devices().

Ported from Ray by rewriting imports only: ray.air/ray.train -> engine.
"""

import torch

from engine import ScalingConfig, RunConfig
from engine import session
from engine.horovod import HorovodConfig, HorovodTrainer
from engine.torch import TorchTrainer, get_devices, prepare_model


def train_func(config):
    assert [d.type for d in get_devices()] == ["cpu"]
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(4, 1), parallel_strategy="fsdp")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 4), torch.randn(64, 1)
    for epoch in range(2):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        session.report({"epoch": epoch, "loss": loss.item(),
                        "wrapper": type(model).__name__})


result = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                      run_config=RunConfig(verbose=0)).fit()
metrics = result.metrics
assert metrics["wrapper"] == "FullyShardedDataParallel", metrics["wrapper"]
for key in ("_timestamp", "_time_this_iter_s", "_training_iteration", "timesteps_total",
            "episodes_total", "timesteps_since_restore", "warmup_time"):
    assert key in metrics, key
assert metrics["_training_iteration"] == 2 and metrics["timesteps_total"] is None
assert metrics["warmup_time"] >= 0 and metrics["timesteps_since_restore"] == 0


def hvd_func():
    import horovod.torch as hvd

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    session.report({"sum": total.item(), "size": hvd.size()})


trainer = HorovodTrainer(hvd_func, tensorflow_backend=HorovodConfig(),
                         scaling_config=ScalingConfig(num_workers=2),
                         run_config=RunConfig(verbose=0))
result = trainer.fit()
assert result.metrics["size"] == 2 and result.metrics["sum"] == 3.0, result.metrics
print("OK")
