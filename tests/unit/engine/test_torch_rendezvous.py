"""The torch process group's rendezvous.

Two real processes run the workers' set-up (``engine.torch.config``) on loopback, one
rank starting late, as on a loaded machine where a rank still imports torch when the
others are ready. No Ray: these are the set-up functions the backend runs on each rank
(the backend passes rank 0's port to the others through Ray; here through a queue).
"""

from __future__ import annotations

import errno
import multiprocessing
import queue
import socket
import time

import pytest

from engine.torch import TorchConfig

torch = pytest.importorskip("torch")


def _rank(rank: int, ports: "multiprocessing.Queue", delay_s: float, timeout_s: float,
          rendezvous_s: float, out: "multiprocessing.Queue") -> None:
    time.sleep(delay_s)
    try:
        import torch
        import torch.distributed as dist

        from engine.torch.config import _setup_worker, _start_master_store

        if rank == 0:
            port = _start_master_store("127.0.0.1", 2, rendezvous_s)
            ports.put(port)
        else:
            port = ports.get(timeout=120)
        _setup_worker("gloo", "127.0.0.1", port, rank, 2, rank, 2, 0, timeout_s, rendezvous_s)
        t = torch.ones(1) * (rank + 1)
        dist.all_reduce(t)
        dist.destroy_process_group()
        out.put((rank, "ok", float(t.item())))
    except Exception as e:  # the parent asserts on what each rank saw
        out.put((rank, "error", f"{type(e).__name__}: {e}"))


def _run_two(delay_rank1_s: float, config: TorchConfig) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out, ports = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, ports, delay_rank1_s if r == 1 else 0.0,
                                             config.timeout_s,
                                             config.effective_rendezvous_timeout_s, out))
             for r in (0, 1)]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in procs:
            rank, status, value = out.get(timeout=120)
            results[rank] = (status, value)
    except queue.Empty:
        pass
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    return results


def test_a_rank_later_than_the_collective_timeout_still_joins():
    """timeout_s=2, rank 1 reaches the store 6 s after rank 0: the ranks' wait for each
    other is bounded by the rendezvous timeout, not the collectives' 2 s."""
    config = TorchConfig(timeout_s=2)
    assert config.effective_rendezvous_timeout_s == 300
    results = _run_two(6.0, config)
    assert results == {0: ("ok", 3.0), 1: ("ok", 3.0)}


def test_an_explicit_rendezvous_timeout_bounds_the_wait():
    config = TorchConfig(timeout_s=60, rendezvous_timeout_s=2)
    assert config.effective_rendezvous_timeout_s == 2
    results = _run_two(8.0, config)
    status, message = results[0]
    assert status == "error", results
    assert "timed out" in message and "1 of 2 ranks" in message, message
    assert "rendezvous_timeout_s" in message, message


def test_rank0s_store_holds_its_port_from_the_moment_it_is_known(monkeypatch):
    """The port is the one rank 0's store bound (port 0, the OS's pick): no other
    process can take it between choosing and binding, as it could a port probed free
    and closed (CI: EADDRINUSE when the ranks built the store on such a port)."""
    import torch.distributed as dist

    from engine.torch import config

    monkeypatch.setattr(config, "_MASTER_STORE", None)
    port = config._start_master_store("127.0.0.1", 2, 30)
    with socket.socket() as s, pytest.raises(OSError) as taken:
        s.bind(("127.0.0.1", port))
    assert taken.value.errno == errno.EADDRINUSE
    client = dist.TCPStore("127.0.0.1", port, 2, is_master=False)
    client.set("k", "v")
    assert config._MASTER_STORE.get("k") == b"v"


def test_the_default_rendezvous_timeout_is_at_least_the_collective_timeout():
    assert TorchConfig().effective_rendezvous_timeout_s == 1800
    assert TorchConfig(timeout_s=10, rendezvous_timeout_s=45).effective_rendezvous_timeout_s == 45


def test_frameworks_ports_are_drawn_below_the_ephemeral_range():
    """TensorFlow's and LightGBM's servers bind the port themselves, after the draw: a
    port below the kernel's ephemeral range is not handed to a process binding port 0."""
    from engine._internal.worker_group.worker import draw_free_port

    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    ports = {draw_free_port() for _ in range(20)}
    assert all(20000 <= p < ephemeral_low for p in ports), ports
    assert len(ports) > 1  # drawn, not one fixed port
    for p in ports:
        with socket.socket() as s:
            s.bind(("", p))


def test_a_worker_kept_for_the_next_trial_sets_up_a_new_process_group(monkeypatch):
    """The pool resets a worker between trials (engine._internal.worker_group.pool): the
    process group is destroyed and rank 0's store dropped, and the next trial's set-up
    on the same process opens its own (one rank, in this process)."""
    import torch.distributed as dist

    from engine._internal.worker_group.pool import reset_worker
    from engine.torch import config

    monkeypatch.setattr(config, "_MASTER_STORE", None)
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                 "LOCAL_WORLD_SIZE", "NODE_RANK"):  # set by the set-up, as on a worker
        monkeypatch.setenv(name, "")
    for trial in range(2):
        port = config._start_master_store("127.0.0.1", 1, 30)
        config._setup_worker("gloo", "127.0.0.1", port, 0, 1, 0, 1, 0, 30, 30)
        t = torch.ones(1) * (trial + 1)
        dist.all_reduce(t)
        assert float(t.item()) == trial + 1
        assert reset_worker() is True
        assert not dist.is_initialized() and config._MASTER_STORE is None
