"""The benchmark's child-process protocol (bench._child), without running a benchmark:
the command the runner builds is the one a child parses, and what a role returns is
what the runner reads back."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench._child import child_command, child_main, read_json, run_child, write_json

REPO = Path(__file__).resolve().parents[3]


class InProcessContext(SimpleNamespace):
    """A repetition's context whose "process" is the child's main, run in this process
    from the very command the runner would start."""

    def run_process(self, cmd, *, env=None, cwd=None, log_name="proc"):
        self.cmd, self.env, self.log_name = cmd, env, log_name
        module_at = cmd.index("-m")
        assert cmd[module_at + 1] == "bench.example"
        child_main(self.roles, cmd[module_at + 2:])
        return 1.5


def test_a_role_gets_its_params_and_the_runner_gets_its_result(tmp_path):
    calls = []

    def ours(epochs, out):
        calls.append((epochs, out))
        return {"epochs_seen": epochs, "nested": {"out": out}}

    ctx = InProcessContext(workdir=tmp_path, roles={"ours": ours})
    wall, result = run_child(ctx, "bench.example", "ours", {"epochs": 3, "out": "x y"},
                             log_name="trainyard")
    assert calls == [(3, "x y")]
    assert (wall, result) == (1.5, {"epochs_seen": 3, "nested": {"out": "x y"}})
    assert ctx.log_name == "trainyard"
    assert str(REPO) in ctx.env["PYTHONPATH"].split(":") and "RAY_ADDRESS" not in ctx.env


def test_a_role_that_returns_nothing_gives_an_empty_result(tmp_path):
    ctx = InProcessContext(workdir=tmp_path, roles={"anchor": lambda **_: None})
    launcher = ["horovodrun", "-np", "2", "python"]
    wall, result = run_child(ctx, "bench.example", "anchor", {"a": 1}, launcher=launcher)
    assert result == {} and ctx.cmd[:4] == launcher and ctx.log_name == "anchor"


def test_an_unknown_role_or_bad_params_fail_loudly(tmp_path):
    with pytest.raises(SystemExit):
        child_main({"ours": lambda: {}}, ["--child", "anchor"])
    with pytest.raises(TypeError, match="epochs"):
        child_main({"ours": lambda: {}}, ["--child", "ours", "--params", '{"epochs": 1}'])


def test_json_files_are_written_whole_and_read_back(tmp_path):
    path = tmp_path / "loop.json"
    write_json(path, {"in_loop_s": 1.25, "where": tmp_path})
    assert read_json(path) == {"in_loop_s": 1.25, "where": str(tmp_path)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop.json"]
    cmd = child_command("bench.ddp", "ours", {"epochs": 2}, result=path)
    assert cmd[-4:] == ["--params", json.dumps({"epochs": 2}), "--result", str(path)]


def test_bench_uses_only_the_public_engine_api():
    private = []
    for path in sorted((REPO / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            private += [f"{path.name}: {n}" for n in names if n.startswith("engine._internal")]
    assert private == []


def test_breakdown_splits_a_process_at_every_mark_in_time_order():
    from bench.xgboost import breakdown

    marks = [("driver", "ray_started", 13.0), ("child", "imports", 11.0),
             ("rank0", "read_train", 14.5), ("child", "fit_returned", 20.0)]
    assert breakdown(marks, 10.0, 21.5) == {
        "imports": 1.0, "ray_started": 2.0, "rank0:read_train": 1.5, "fit_returned": 5.5,
        "exit": 1.5}
    assert breakdown([], 10.0, 21.5) == {}


def test_machine_cpu_splits_the_stretch_by_kind_of_process():
    """Between start() and stop(): a process that lived through counts its difference, one
    started meanwhile counts whole, a pid reused by another process counts whole, one that
    used nothing is not listed; the given pid's kind is split from the rest."""
    from bench._child import MachineCpu

    before = {10: (5.0, "100", "ray TrainWorker", 1), 11: (4.0, "101", "ray TrainWorker", 1),
              20: (7.0, "50", "raylet", 1), 30: (1.0, "60", "python old", 1),
              40: (2.0, "70", "gcs_server", 1)}
    after = {10: (6.5, "100", "ray TrainWorker", 1), 11: (5.25, "101", "ray TrainWorker", 1),
             20: (7.5, "50", "raylet", 1), 30: (0.75, "999", "python reused", 1),
             40: (2.0, "70", "gcs_server", 1), 50: (0.25, "900", "ray IDLE", 1)}
    readings = iter([before, after])
    machine = iter([100.0, 104.5])
    cpu = MachineCpu(read=lambda: next(readings), machine=lambda: next(machine))
    cpu.start()
    out = cpu.stop(own_kind_of=10)
    assert out["machine_cpu_s"] == 4.5
    assert out["by_kind"] == {"ray TrainWorker": 2.75, "python reused": 0.75,
                              "raylet": 0.5, "ray IDLE": 0.25}
    assert list(out["by_kind"]) == ["ray TrainWorker", "python reused", "raylet", "ray IDLE"]
    assert (out["own_kind"], out["own_kind_cpu_s"], out["others_cpu_s"]) == (
        "ray TrainWorker", 2.75, 1.5)


def test_machine_cpu_reads_this_machine_and_finds_its_own_process():
    """On the real /proc: this process is found under its kind and the machine's count
    covers at least what this process burnt in between."""
    import os
    import time

    from bench._child import MachineCpu

    cpu = MachineCpu()
    cpu.start()
    t0 = time.process_time()
    while time.process_time() - t0 < 0.2:
        pass
    out = cpu.stop(own_kind_of=os.getpid())
    assert out["own_kind_cpu_s"] >= 0.15
    assert out["machine_cpu_s"] >= 0.15
    assert out["own_kind"] in out["by_kind"] or len(out["by_kind"]) == MachineCpu.TOP
