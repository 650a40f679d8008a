"""One protocol for the processes a benchmark starts, and for the JSON they send back.

A side that runs as a fresh process (like a user's ``python train.py``) is one *role* of
its workload module, started as::

    python -m bench.<module> --child ROLE --params '<JSON object>' --result PATH

:func:`run_child` builds that command (behind a launcher such as torchrun or
horovodrun when given one), runs it under the runner's
:class:`~bench.core.Context` (whole wall, RSS probe, log, timeout) and reads ``PATH``
back; the module ends with ``child_main({"ROLE": function, ...})``, which calls
``function(**params)`` and writes the dict it returns to ``PATH``. Files that workers
and anchor processes write for the runner (loop timings, stamps) go through
:func:`write_json` / :func:`read_json`: written whole (a temporary file, then a
rename), so a reader never sees half a file.

Only the standard library is imported here: anchor processes import this module too,
and their start-up is part of what is timed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from bench.core import Context

REPO = Path(__file__).resolve().parent.parent
PYTHON = (sys.executable,)


# --- JSON files ------------------------------------------------------------------------
def write_json(path: Any, data: Any) -> None:
    """Write ``data`` to ``path`` as JSON, whole: a temporary file, then a rename."""
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, default=str)
    os.replace(tmp, path)


def read_json(path: Any) -> Any:
    """The JSON value in ``path``."""
    with open(path) as f:
        return json.load(f)


# --- the runner's side -------------------------------------------------------------------
def child_env(**extra: str) -> Dict[str, str]:
    """The environment for a benchmark subprocess: ours and the anchor get the same one.

    The repository is on PYTHONPATH (the torchrun script and the trainyard child import
    ``bench``); RAY_ADDRESS is dropped so a child starts its own Ray like a fresh process.
    """
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH")] if p)
    env.update(extra)
    return env


def child_command(module: str, role: str, params: Mapping[str, Any],
                  result: Optional[Any] = None, launcher: Sequence[str] = PYTHON
                  ) -> List[str]:
    """``<launcher> -m <module> --child <role> --params <JSON> [--result <path>]``.

    ``launcher`` is the Python interpreter by default; a launcher that starts several
    copies ends with whatever runs ``-m module`` (``horovodrun ... python``, or
    ``python -m torch.distributed.run ...``, which takes ``-m`` itself).
    """
    cmd = [*launcher, "-m", module, "--child", role, "--params", json.dumps(params)]
    if result is not None:
        cmd += ["--result", os.fspath(result)]
    return cmd


def run_child(ctx: "Context", module: str, role: str, params: Mapping[str, Any], *,
              env: Optional[Dict[str, str]] = None, log_name: Optional[str] = None,
              launcher: Sequence[str] = PYTHON) -> Tuple[float, Dict[str, Any]]:
    """Run one role of ``module`` in a fresh process of this repetition.

    Args:
        ctx: The repetition's context: its ``run_process`` times the process and
            samples its RSS; the result file goes to its ``workdir``.
        module: The workload module (``bench.ddp``).
        role: Which of its roles (a key of the module's ``child_main`` dict).
        params: The role function's keyword arguments (JSON-able).
        env: The process's environment (default :func:`child_env`).
        log_name: The log's name in ``workdir`` (default the role).
        launcher: What starts ``-m module`` (default this interpreter).

    Returns:
        The process's whole wall in seconds, and the dict the role returned (empty when
        it returned None, e.g. the ranks of a launcher).
    """
    result = ctx.workdir / f"{role}.result.json"
    cmd = child_command(module, role, params, result, launcher)
    wall = ctx.run_process(cmd, env=env if env is not None else child_env(),
                           log_name=log_name or role)
    return wall, (read_json(result) if result.exists() else {})


def loop_summary(ctx: "Context", loop: Mapping[str, Any], keys: Sequence[str]
                 ) -> Dict[str, Any]:
    """The ``keys`` of what rank 0 wrote about its training loop, plus the last
    process's whole wall split around the loop: process start → loop start
    (``start_to_loop_s``) and loop end → process exit (``loop_end_to_exit_s``), when the
    loop wrote its wall-clock ``loop_start_unix`` and ``loop_end_unix``."""
    out = {k: loop.get(k) for k in keys}
    if ctx.last_process_start_unix and loop.get("loop_start_unix"):
        out["start_to_loop_s"] = loop["loop_start_unix"] - ctx.last_process_start_unix
        out["loop_end_to_exit_s"] = ctx.last_process_end_unix - loop["loop_end_unix"]
    return out


# --- the child's side --------------------------------------------------------------------
Role = Callable[..., Optional[Dict[str, Any]]]


def child_main(roles: Mapping[str, Role], argv: Optional[Sequence[str]] = None) -> None:
    """In ``if __name__ == "__main__":`` of a workload module: run the role named by
    ``--child`` with the ``--params`` as keyword arguments, and write what it returns
    (a dict; None writes nothing) to ``--result``."""
    import argparse

    parser = argparse.ArgumentParser(description="One side of a benchmark (run by "
                                                 "bench.run through bench._child).")
    parser.add_argument("--child", choices=sorted(roles), required=True)
    parser.add_argument("--params", default="{}", help="the role's arguments, as JSON")
    parser.add_argument("--result", help="where to write the role's result (JSON)")
    args = parser.parse_args(argv)
    out = roles[args.child](**json.loads(args.params))
    if args.result and out is not None:
        write_json(args.result, out)


class Phases:
    """The wall of each phase of a child process: ``mark(name)`` ends the phase that
    began at the previous mark (or when this was made); ``seconds`` holds them in order."""

    def __init__(self) -> None:
        import time

        self._clock = time.perf_counter
        self._last = self._clock()
        self.seconds: Dict[str, Optional[float]] = {}

    def mark(self, name: str, measured: bool = True) -> None:
        """End phase ``name`` now (recorded as None when it was not ``measured``)."""
        now = self._clock()
        self.seconds[name] = now - self._last if measured else None
        self._last = now


def fit_and_count(trainer: Any, phases: Phases, epochs: int) -> Dict[str, Any]:
    """Ours' ``trainer.fit()`` in a child process: phase ``fit_s`` (trainer construction
    included, when made since the last mark), its last report checked to be epoch
    ``epochs - 1``, then the Ray objects alive right after it (phase
    ``count_ray_objects_s``), which this returns."""
    from bench.core import count_ray_objects

    result = trainer.fit()
    phases.mark("fit_s")
    assert result.metrics["epoch"] == epochs - 1, result.metrics
    ray_objects = count_ray_objects()
    phases.mark("count_ray_objects_s")
    return ray_objects


def process_report(phases: Dict[str, Optional[float]], ray_objects: Dict[str, Any]
                   ) -> Dict[str, Any]:
    """What a side's whole process says about itself, for the runner's record: the
    phases it timed, the Ray objects alive right after ``fit()`` (counted in the
    child: its Ray exits with it) and its peak RSS."""
    from bench.core import runner_maxrss_bytes

    ids = ("actor_ids", "placement_group_ids")
    return {"child_phases_s": phases,
            "child_ray_objects_after_fit": {k: v for k, v in ray_objects.items()
                                            if k not in ids},
            "child_maxrss_mb": runner_maxrss_bytes() / 2**20}


def with_own_ray(num_cpus: int, side: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
    """In a child: run ``side()`` on a fresh local Ray of ``num_cpus`` logical CPUs, and
    add what it left alive (counted 2 s later: actor kills and placement group removals
    are asynchronous) as ``child_ray_objects_after_fit``; Ray is shut down after."""
    import time

    import ray

    from bench.core import count_ray_objects

    # address="local": a fresh instance even if another local cluster is running.
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
             _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        out = side()
        time.sleep(2.0)
        out["child_ray_objects_after_fit"] = count_ray_objects()
        return out
    finally:
        ray.shutdown()


class MachineCpu:
    """The CPU every process on the machine used between :meth:`start` and :meth:`stop`,
    by kind of process (``scripts/cpu_by_process.py``'s kinds: ``ray TrainWorker``,
    ``python bench/ddp_loop.py``, ``raylet`` …), read from ``/proc`` (Linux only).

    For a benchmark's timed stretch: who else used the machine while it ran. A process
    started after :meth:`start` counts whole; one that exited before :meth:`stop` is
    missed (its CPU shows in ``machine_cpu_s`` only). Each read takes some tens of
    milliseconds of this process's CPU: call both outside the stretch that is timed."""

    TOP = 5  # kinds listed in ``by_kind``

    def __init__(self, read: Optional[Callable[[], Dict[int, Tuple[float, str, str, int]]]]
                 = None, machine: Optional[Callable[[], float]] = None) -> None:
        from scripts.cpu_by_process import cpu_times, machine_cpu_s, used_since

        self._read, self._machine = read or cpu_times, machine or machine_cpu_s
        self._used_since = used_since
        self._before: Dict[int, Tuple[float, str, str, int]] = {}
        self._machine_before = 0.0

    def start(self) -> None:
        self._before = self._read()
        self._machine_before = self._machine()

    def stop(self, own_kind_of: Optional[int] = None) -> Dict[str, Any]:
        """What was used since :meth:`start`: ``machine_cpu_s`` (the kernel's count, all
        CPUs), ``by_kind`` (the :attr:`TOP` kinds that used the most, CPU-s), and with
        ``own_kind_of`` (a pid, e.g. this process's) ``own_kind``, ``own_kind_cpu_s`` (every
        process of that pid's kind: e.g. both ranks of a DDP job) and ``others_cpu_s``
        (every other kind's)."""
        after = self._read()
        machine = self._machine() - self._machine_before
        used: Dict[str, float] = {}
        for _, kind, delta in self._used_since(self._before, after):
            if delta > 0:
                used[kind] = used.get(kind, 0.0) + delta
        top = sorted(used.items(), key=lambda kv: -kv[1])[:self.TOP]
        out: Dict[str, Any] = {"machine_cpu_s": round(machine, 3),
                               "by_kind": {k: round(v, 3) for k, v in top}}
        if own_kind_of is not None and own_kind_of in after:
            own = after[own_kind_of][2]
            out.update(own_kind=own, own_kind_cpu_s=round(used.get(own, 0.0), 3),
                       others_cpu_s=round(sum(v for k, v in used.items() if k != own), 3))
        return out
