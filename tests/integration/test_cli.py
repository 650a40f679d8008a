"""The ``trainyard`` command: ad-hoc runs, listing and showing what storage holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib

import pytest

from tasks.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _json_out(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


@pytest.fixture(scope="module")
def cli_storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cli_storage"))


@pytest.fixture(scope="module")
def cli_run(ray_session, cli_storage):
    """``trainyard run digits`` for 2 epochs (in this process, on the session's Ray)."""
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(["run", "digits", "--epochs", "2", "--workers", "2", "--storage",
                     cli_storage, "--name", "cli-digits", "--set", "lr=0.01", "--json"])
    assert code == 0
    return json.loads(buf.getvalue())


def test_run_trains_evaluates_and_prints_where_things_are(cli_run, cli_storage):
    assert cli_run["run"] == "cli-digits"
    assert cli_run["run_dir"] == os.path.join(cli_storage, "runs", "cli-digits")
    assert cli_run["checkpoint"].startswith(cli_run["run_dir"] + "/checkpoint_")
    assert cli_run["config"]["lr"] == 0.01 and cli_run["config"]["epochs"] == 2
    assert 0.3 < cli_run["validation"]["accuracy"] <= 1
    assert os.path.exists(cli_run["confusion_matrix"])


def test_run_again_with_the_same_name_resumes_the_finished_run(cli_run, cli_storage,
                                                                capsys):
    again = _json_out(capsys, ["run", "digits", "--epochs", "2", "--storage", cli_storage,
                               "--name", "cli-digits", "--set", "lr=0.01", "--json"])
    assert again["checkpoint"] == cli_run["checkpoint"]
    assert again["validation"] == cli_run["validation"]


def test_runs_lists_the_run_with_state_and_best_metric(cli_run, cli_storage, capsys):
    runs = _json_out(capsys, ["runs", "--storage", cli_storage, "--json"])
    run = {r["name"]: r for r in runs}["cli-digits"]
    assert run["kind"] == "train" and run["state"] == "FINISHED" and run["iterations"] == 2
    assert run["metric"] == "accuracy" and run["best"] >= cli_run["validation"]["accuracy"]
    assert run["restores"] == 0
    assert main(["runs", "--storage", cli_storage]) == 0
    table = capsys.readouterr().out
    assert "cli-digits" in table and "FINISHED" in table and "accuracy" in table


def test_show_prints_config_checkpoints_and_metrics(cli_run, cli_storage, capsys):
    shown = _json_out(capsys, ["show", "cli-digits", "--storage", cli_storage, "--json"])
    assert shown["config"]["lr"] == 0.01 and shown["state"] == "FINISHED"
    assert shown["last_metrics"]["epoch"] == 1
    assert [c["dir"] for c in shown["checkpoints"]][-1] == \
        os.path.basename(cli_run["checkpoint"])
    assert main(["show", "cli-digits", "--storage", cli_storage]) == 0
    assert "checkpoint_" in capsys.readouterr().out


def test_errors_exit_2_with_what_to_do(cli_storage, capsys):
    assert main(["show", "no-such-run", "--storage", cli_storage]) == 2
    assert "No run 'no-such-run'" in capsys.readouterr().err
    assert main(["run", "mnist", "--storage", cli_storage]) == 2
    err = capsys.readouterr().err
    assert "Unknown pipeline 'mnist'" in err and "digits" in err
    assert main(["run", "digits", "--set", "lr", "--storage", cli_storage]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def test_trainyard_console_script_and_module_entry_point():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts["trainyard"] == "tasks.cli:main"
    proc = subprocess.run([sys.executable, "-m", "tasks.cli", "pipelines", "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    names = {p["name"]: p for p in json.loads(proc.stdout)}
    assert names["digits"]["framework"] == "torch"
    assert names["breast_cancer"]["framework"] == "xgboost"
