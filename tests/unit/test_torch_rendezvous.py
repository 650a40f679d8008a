"""The process group's rendezvous is not bound by the collectives' timeout.

Two real processes run the workers' set-up (``engine.torch.config._setup_worker``) on
loopback, rank 0 starting late, as on a loaded machine where rank 0 still imports torch
when rank 1 is ready. No Ray: this is the set-up function the backend runs on each rank.
"""

from __future__ import annotations

import multiprocessing
import time

import pytest

from engine.torch import TorchConfig

torch = pytest.importorskip("torch")


def _free_port() -> int:
    from tests.conftest import _free_port as draw  # outside the ephemeral range

    return draw()


def _rank(rank: int, port: int, delay_s: float, timeout_s: float, rendezvous_s: float,
          out: "multiprocessing.Queue") -> None:
    time.sleep(delay_s)
    try:
        import torch
        import torch.distributed as dist

        from engine.torch.config import _setup_worker

        _setup_worker("gloo", "tcp", "127.0.0.1", port, rank, 2, rank, 2, 0,
                      timeout_s, rendezvous_s, None)
        t = torch.ones(1) * (rank + 1)
        dist.all_reduce(t)
        dist.destroy_process_group()
        out.put((rank, "ok", float(t.item())))
    except Exception as e:  # the parent asserts on what each rank saw
        out.put((rank, "error", f"{type(e).__name__}: {e}"))


def _run_two(delay_rank0_s: float, config: TorchConfig) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, delay_rank0_s if r == 0 else 0.0,
                                             config.timeout_s,
                                             config.effective_rendezvous_timeout_s, out))
             for r in (0, 1)]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        rank, status, value = out.get(timeout=120)
        results[rank] = (status, value)
    for p in procs:
        p.join(30)
    return results


def test_rank0_later_than_the_collective_timeout_still_joins():
    """timeout_s=2, rank 0 starts 6 s after rank 1: before this was fixed, rank 1's
    connection to rank 0's store timed out after 2 s and the run failed in set-up."""
    config = TorchConfig(timeout_s=2)
    assert config.effective_rendezvous_timeout_s == 300
    results = _run_two(6.0, config)
    assert results == {0: ("ok", 3.0), 1: ("ok", 3.0)}


def test_an_explicit_rendezvous_timeout_bounds_the_wait():
    config = TorchConfig(timeout_s=60, rendezvous_timeout_s=2)
    assert config.effective_rendezvous_timeout_s == 2
    results = _run_two(8.0, config)
    status, message = results[1]
    assert status == "error" and "timed out" in message, results


def test_the_default_rendezvous_timeout_is_at_least_the_collective_timeout():
    assert TorchConfig().effective_rendezvous_timeout_s == 1800
    assert TorchConfig(timeout_s=10, rendezvous_timeout_s=45).effective_rendezvous_timeout_s == 45
