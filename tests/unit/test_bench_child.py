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

REPO = Path(__file__).resolve().parents[2]


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
