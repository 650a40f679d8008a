"""The tiny DDP job of the ``ddp`` workload — one loop, run by both sides.

Linear(32 → 1) on 4,096 synthetic rows, batch 256, SGD, MSE, gloo, 2 processes; the
same seeds for data and weights on both sides, and the same DistributedSampler order
(shuffle, seed 0, ``set_epoch(epoch)``), so both sides end at the same loss.

* trainyard: :func:`trainyard_train_func`, run by ``engine.torch.TorchTrainer`` through
  ``prepare_model`` + ``prepare_data_loader``, reporting every epoch.
* anchor: this file as a script under ``python -m torch.distributed.run
  --nproc_per_node=2 bench/ddp_loop.py --epochs N --out F`` (plain DDP +
  DistributedSampler, no report).

Rank 0 times the loop itself (first epoch start → end of the last epoch, reports
included) and writes it to a JSON file. This module imports only torch and the
standard library.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bench._child import MachineCpu, write_json

IN_DIM = 32
ROWS = 4096
BATCH_SIZE = 256
LR = 0.05
SEED = 0


def make_dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(ROWS, IN_DIM, generator=g)
    w = torch.randn(IN_DIM, 1, generator=g)
    y = x @ w + 0.1 * torch.randn(ROWS, 1, generator=g)
    return TensorDataset(x, y)


def make_model() -> nn.Module:
    torch.manual_seed(SEED)
    return nn.Linear(IN_DIM, 1)


def run_epochs(model: nn.Module, loader: Any, optimizer: torch.optim.Optimizer, epochs: int,
               on_epoch_end: Callable[[int, float], None],
               before_epoch: Optional[Callable[[int], None]] = None,
               epoch_ends: Optional[List[float]] = None,
               machine: Optional[MachineCpu] = None) -> Tuple[float, float]:
    """The training loop. Returns (seconds from the first epoch start to the end of the
    last epoch, the last batch's loss); appends each epoch's end time to ``epoch_ends``.
    With ``machine`` (rank 0's, on both sides), what every process on the machine used
    during the loop is read just before and just after it, outside the timed stretch."""
    loss_fn = nn.MSELoss()
    loss_value = float("nan")
    ends = epoch_ends if epoch_ends is not None else []
    if machine is not None:
        machine.start()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    ends.append(t0)
    for epoch in range(epochs):
        if before_epoch is not None:
            before_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        loss_value = loss.item()
        on_epoch_end(epoch, loss_value)
        ends.append(time.perf_counter())
    _LAST_LOOP_CPU_S[0] = time.process_time() - cpu0
    _LAST_LOOP_MACHINE.clear()
    if machine is not None:
        _LAST_LOOP_MACHINE.update(machine.stop(own_kind_of=os.getpid()))
    return ends[-1] - t0, loss_value


# CPU seconds (all threads of this process) spent during the last run_epochs call.
_LAST_LOOP_CPU_S = [float("nan")]
# The machine's CPU during the last run_epochs call given a MachineCpu (MachineCpu.stop).
_LAST_LOOP_MACHINE: Dict[str, Any] = {}


def write_result(path: str, framework: str, epochs: int, in_loop_s: float,
                 final_loss: float, steps_per_epoch: int, epoch_ends: List[float]) -> None:
    epoch_s = sorted(b - a for a, b in zip(epoch_ends, epoch_ends[1:]))
    to_unix = time.time() - time.perf_counter()
    data: Dict[str, Any] = {
        "loop_start_unix": epoch_ends[0] + to_unix, "loop_end_unix": epoch_ends[-1] + to_unix,
        "framework": framework, "epochs": epochs, "in_loop_s": in_loop_s,
        "first_epoch_s": epoch_ends[1] - epoch_ends[0] if len(epoch_ends) > 1 else None,
        "epoch_median_s": epoch_s[len(epoch_s) // 2] if epoch_s else None,
        "epoch_max_s": epoch_s[-1] if epoch_s else None,
        "loop_cpu_s": _LAST_LOOP_CPU_S[0],
        # Who used the machine during the loop: both ranks (their kind of process) and
        # everything else (Ray's daemons and idle workers on ours' side, the launcher on
        # torchrun's), with the kinds that used the most.
        "loop_machine_cpu_s": _LAST_LOOP_MACHINE.get("machine_cpu_s"),
        "loop_ranks_cpu_s": _LAST_LOOP_MACHINE.get("own_kind_cpu_s"),
        "loop_others_cpu_s": _LAST_LOOP_MACHINE.get("others_cpu_s"),
        "loop_cpu_by_kind": _LAST_LOOP_MACHINE.get("by_kind"),
        "final_loss": final_loss, "steps_per_epoch_per_rank": steps_per_epoch,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "pid": os.getpid(),
    }
    write_json(path, data)


def _optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR)


def trainyard_train_func(config: Dict[str, Any]) -> None:
    """trainyard's side: prepare_model / prepare_data_loader, report every epoch."""
    import engine
    from engine.torch import prepare_data_loader, prepare_model

    model = prepare_model(make_model())
    loader = prepare_data_loader(DataLoader(make_dataset(), batch_size=BATCH_SIZE,
                                            shuffle=True))
    optimizer = _optimizer(model)
    ends: List[float] = []
    rank0 = engine.get_context().get_world_rank() == 0
    in_loop_s, loss = run_epochs(
        model, loader, optimizer, config["epochs"],
        on_epoch_end=lambda epoch, l: engine.report({"epoch": epoch, "loss": l}),
        epoch_ends=ends, machine=MachineCpu() if rank0 else None)
    if rank0:
        write_result(config["out"], "trainyard", config["epochs"], in_loop_s, loss,
                     len(loader), ends)


def torchrun_main(argv: Optional[list] = None) -> None:
    """The anchor's side, one process of ``torchrun --nproc_per_node=2``."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DistributedSampler

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    dist.init_process_group("gloo")
    model = DistributedDataParallel(make_model())
    dataset = make_dataset()
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
    optimizer = _optimizer(model)
    ends: List[float] = []
    in_loop_s, loss = run_epochs(model, loader, optimizer, args.epochs,
                                 on_epoch_end=lambda epoch, l: None,
                                 before_epoch=sampler.set_epoch, epoch_ends=ends,
                                 machine=MachineCpu() if dist.get_rank() == 0 else None)
    if dist.get_rank() == 0:
        write_result(args.out, "torchrun", args.epochs, in_loop_s, loss, len(loader), ends)
    dist.destroy_process_group()


if __name__ == "__main__":
    torchrun_main(sys.argv[1:])
