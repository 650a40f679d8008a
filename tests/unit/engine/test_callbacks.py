"""Callbacks without Ray: the LoggerCallback mapping, the built-in file loggers, error
isolation, fit() as a single trial (scripted fake worker group), reductions and plots."""

from __future__ import annotations

import csv
import json
import logging
import os

import pyarrow.fs as pafs
import pytest

from engine import ConfigError, RunConfig, constants
from engine._internal.execution.callback_runner import CallbackRunner
from engine._internal.storage.filesystem import Storage
from engine._internal.worker_group.metrics import reduce_metrics
from engine.callbacks import (Callback, CSVLoggerCallback, JsonLoggerCallback,
                              LoggerCallback, TensorBoardLoggerCallback, Trial)
from engine.result import Result
from tests.support.event_files import hparams, read_events, scalars
from tests.support.fakes import both, done, run


class LoggingCallback(LoggerCallback):
    """The seed's example: no super().__init__()."""

    def __init__(self) -> None:
        self.results = []

    def log_trial_result(self, iteration, trial, result):
        self.results.append(trial.last_result)


class Events(LoggerCallback):
    def __init__(self):
        self.events = []

    def log_trial_start(self, trial):
        self.events.append(("start", str(trial), trial.status))

    def log_trial_result(self, iteration, trial, result):
        assert trial.last_result is result
        self.events.append(("result", iteration, result["x"]))

    def log_trial_end(self, trial, failed=False):
        self.events.append(("end", failed, trial.status))


def _trial(tmp_path, name="t", **kw) -> Trial:
    return Trial(trial_id=f"{name}_id", trial_name=name, path=str(tmp_path / name), **kw)


def _result(i, **metrics):
    return dict(metrics, training_iteration=i, trial_id="t_id", config={"lr": 0.1})


# --- LoggerCallback and the trial hooks ------------------------------------------------
def test_logger_callback_maps_trial_hooks(tmp_path):
    cb = Events()
    trial = _trial(tmp_path)
    runner = CallbackRunner([cb])
    runner.start_run("t", {}, trial)
    runner.report(_result(1, x=10), [_result(1, x=10)])
    runner.report(_result(2, x=20), [_result(2, x=20)])
    runner.end_run(Result())
    assert cb.events == [("start", "t", "RUNNING"), ("result", 1, 10), ("result", 2, 20),
                         ("end", False, "TERMINATED")]
    assert trial.last_result["x"] == 20


def test_logger_callback_end_on_error(tmp_path):
    cb = Events()
    runner = CallbackRunner([cb])
    trial = _trial(tmp_path)
    runner.start_run("t", {}, trial)
    err = ValueError("boom")
    runner.end_run(Result(error=err), err)
    assert cb.events[-1] == ("end", True, "ERROR") and trial.error is err


def test_plain_fit_is_one_trial_for_the_seed_callback(tmp_path):
    cb = LoggingCallback()
    controller, _ = run(tmp_path, [[both(1, epoch=0), both(2, epoch=1), both(3, epoch=2),
                                    done()]], callbacks=[cb])
    result = controller.run()
    assert [r["epoch"] for r in cb.results] == [0, 1, 2]
    for key in ("trial_id", "experiment_id", "training_iteration", "config"):
        assert key in cb.results[0], key
    assert cb.results[0]["trial_id"] == result.metrics["trial_id"]


def test_raising_callback_is_disabled_and_listed(tmp_path, caplog):
    class Broken(Callback):
        calls = 0

        def on_report(self, metrics, all_metrics):
            Broken.calls += 1
            raise RuntimeError("tracking server down")

    seen = LoggingCallback()
    controller, _ = run(tmp_path, [[both(1, epoch=0), both(2, epoch=1), done()]],
                        callbacks=[Broken(), seen])
    with caplog.at_level(logging.ERROR, logger="engine"):
        result = controller.run()
    assert Broken.calls == 1  # disabled after the first failure
    assert [r["epoch"] for r in seen.results] == [0, 1]  # the others go on
    assert result.metrics["epoch"] == 1
    assert result.callback_errors == [
        "Broken.on_report raised RuntimeError: tracking server down"]
    logged = [r for r in caplog.records if "Broken.on_report" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


# --- default loggers ---------------------------------------------------------------------
def test_default_loggers_write_json_and_csv(tmp_path):
    controller, _ = run(tmp_path, [[both(1, x=1), both(2, x=2, nested={"a": 3}), done()]])
    result = controller.run()
    with open(os.path.join(result.path, constants.RESULT_JSON_FILE)) as f:
        lines = [json.loads(line) for line in f]
    assert [row["x"] for row in lines] == [1, 2]
    assert lines[1]["nested"] == {"a": 3} and lines[1]["config"] == {"k": 1}
    assert lines[0]["trial_id"] == result.metrics["trial_id"]
    with open(os.path.join(result.path, constants.PROGRESS_CSV_FILE)) as f:
        rows = list(csv.DictReader(f))
    assert [r["x"] for r in rows] == ["1", "2"] and rows[1]["nested/a"] == "3"
    assert rows[0]["nested/a"] == "" and "config" not in rows[0]
    with open(os.path.join(result.path, constants.PARAMS_JSON_FILE)) as f:
        assert json.load(f) == {"k": 1}


def test_default_loggers_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv(constants.DISABLE_DEFAULT_LOGGERS_ENV_VAR, "1")
    result = run(tmp_path, [[both(1, x=1), done()]])[0].run()
    assert not os.path.exists(os.path.join(result.path, constants.RESULT_JSON_FILE))
    assert not os.path.exists(os.path.join(result.path, constants.PROGRESS_CSV_FILE))


def test_a_user_logger_replaces_the_default_of_its_type():
    mine = JsonLoggerCallback()
    runner = CallbackRunner.with_defaults([mine])
    assert [type(cb).__name__ for cb in runner.callbacks] == [
        "CSVLoggerCallback", "JsonLoggerCallback"]
    assert runner.callbacks[1] is mine


# --- the file loggers --------------------------------------------------------------------
def _feed(cb, trial, results):
    cb.log_trial_start(trial)
    for r in results:
        trial.last_result = r
        cb.log_trial_result(r["training_iteration"], trial, r)


def test_csv_late_keys_rewrite_the_header(tmp_path):
    cb, trial = CSVLoggerCallback(), _trial(tmp_path)
    _feed(cb, trial, [_result(1, a=1), _result(2, a=2, b="x"), _result(3, a=3),
                      _result(4, a=4, c=[1, 2], d=None)])
    cb.log_trial_end(trial)
    with open(os.path.join(trial.path, "progress.csv")) as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == ["a", "training_iteration", "trial_id", "b", "c", "d"]
    assert [(r["a"], r["b"], r["c"]) for r in rows] == [
        ("1", "", ""), ("2", "x", ""), ("3", "", ""), ("4", "", "[1, 2]")]


def test_rounds_redone_after_a_retry_replace_their_rows(tmp_path):
    json_cb, csv_cb, trial = JsonLoggerCallback(), CSVLoggerCallback(), _trial(tmp_path)
    for cb in (json_cb, csv_cb):
        _feed(cb, trial, [_result(1, a=1), _result(2, a=2), _result(3, a=3),
                          _result(3, a=33), _result(4, a=4)])
        cb.log_trial_end(trial)
    with open(os.path.join(trial.path, "result.json")) as f:
        assert [json.loads(line)["a"] for line in f] == [1, 2, 33, 4]
    with open(os.path.join(trial.path, "progress.csv")) as f:
        assert [r["a"] for r in csv.DictReader(f)] == ["1", "2", "33", "4"]


def test_a_resumed_trial_continues_its_files_and_drops_a_torn_line(tmp_path):
    trial = _trial(tmp_path)
    for cb in (JsonLoggerCallback(), CSVLoggerCallback()):
        _feed(cb, trial, [_result(1, a=1), _result(2, a=2)])
        cb.log_trial_end(trial)
    with open(os.path.join(trial.path, "result.json"), "a") as f:
        f.write('{"a": 3, "training_it')  # the driver died mid-write
    with open(os.path.join(trial.path, "progress.csv"), "a") as f:
        f.write("3,")
    for cb in (JsonLoggerCallback(), CSVLoggerCallback()):  # a new driver resumes
        _feed(cb, trial, [_result(2, a=22), _result(3, a=3)])
        cb.log_trial_end(trial)
    with open(os.path.join(trial.path, "result.json")) as f:
        assert [json.loads(line)["a"] for line in f] == [1, 22, 3]
    with open(os.path.join(trial.path, "progress.csv")) as f:
        assert [r["a"] for r in csv.DictReader(f)] == ["1", "22", "3"]


def test_object_store_files_are_written_whole_at_checkpoints_and_end():
    fs = pafs._MockFileSystem()  # no append, like S3: the logger buffers
    fs.create_dir("run")
    trial = Trial(trial_id="m", trial_name="m", path="mock://run",
                  storage=Storage(fs, "run"))
    cb = JsonLoggerCallback()
    _feed(cb, trial, [_result(1, a=1)])
    assert fs.get_file_info("run/result.json").type == pafs.FileType.NotFound
    cb.on_checkpoint(None, {})
    with fs.open_input_stream("run/result.json") as f:
        assert [json.loads(line)["a"] for line in f.read().decode().splitlines()] == [1]
    _feed(cb, trial, [_result(2, a=2)])
    cb.log_trial_end(trial)
    with fs.open_input_stream("run/result.json") as f:
        assert [json.loads(line)["a"] for line in f.read().decode().splitlines()] == [1, 2]


# --- TensorBoard (tensorboardX writes local files: no Ray needed) ------------------------
def test_tensorboard_scalars_and_hparams_for_a_tuner_trial(tmp_path):
    cb = TensorBoardLoggerCallback()
    trial = _trial(tmp_path, config={"lr": 0.1, "model": {"layers": 2}, "tag": None},
                   evaluated_params={"lr": 0.1, "model/layers": 2})
    runner = CallbackRunner([cb])
    runner.call("on_trial_start", 0, [trial], trial)
    for i in (1, 2):
        trial.last_result = _result(i, loss=1.0 / i, val={"acc": 0.5 * i}, name="s", ok=True)
        runner.call("on_trial_result", i, [trial], trial, trial.last_result)
    runner.call("on_trial_complete", 2, [trial], trial)
    assert runner.errors == []
    events = read_events(trial.path)
    curves = scalars(events)
    assert curves["loss"] == [(1, 1.0), (2, 0.5)]
    assert curves["val/acc"] == [(1, 0.5), (2, 1.0)]
    assert not {"name", "ok", "training_iteration", "config/lr"} & set(curves)
    assert hparams(events) == {"lr": 0.1, "model/layers": 2}


def test_loggers_on_s3_write_whole_files(s3_server, s3_storage_path, tmp_path):
    storage = Storage.from_path(s3_storage_path)
    trial = Trial(trial_id="s3", trial_name="s3", config={"lr": 0.1},
                  path=storage.display(), storage=storage)
    loggers = [CSVLoggerCallback(), TensorBoardLoggerCallback()]
    runner = CallbackRunner(loggers)
    runner.call("on_trial_start", 0, [trial], trial)
    for i in (1, 2):
        trial.last_result = _result(i, loss=1.0 / i, **({"late": 1} if i == 2 else {}))
        runner.call("on_trial_result", i, [trial], trial, trial.last_result)
    runner.call("on_trial_complete", 2, [trial], trial)
    assert runner.errors == []
    prefix = s3_storage_path.split("?", 1)[0].split("/", 3)[3]
    names = [k[len(prefix) + 1:] for k in s3_server.keys(prefix)]
    assert "progress.csv" in names
    events = [n for n in names if n.startswith("events.out.tfevents")]
    assert len(events) == 1
    rows = list(csv.DictReader(storage.read_bytes(f"{storage.root}/progress.csv")
                               .decode().splitlines()))
    assert [(r["loss"], r["late"]) for r in rows] == [("1.0", ""), ("0.5", "1")]
    local = tmp_path / "tb"
    local.mkdir()
    (local / events[0]).write_bytes(storage.read_bytes(f"{storage.root}/{events[0]}"))
    assert scalars(read_events(str(local)))["loss"] == [(1, 1.0), (2, 0.5)]


# --- metrics from every worker -----------------------------------------------------------
def test_reduce_metrics_over_ranks():
    ranks = [{"loss": 1.0, "n": 3, "v": {"acc": 0.5}, "s": "x"},
             {"loss": 3.0, "n": 4, "v": {"acc": 1.0}, "s": "y"}]
    spec = {"loss": "mean", "n": "sum", "v/acc": "min", "s": "max", "missing": "max"}
    assert reduce_metrics(ranks, spec) == {"loss_mean": 2.0, "n_sum": 7, "v/acc_min": 0.5}


def test_metrics_reduce_config_is_checked():
    with pytest.raises(ConfigError, match="metrics_reduce.*mean, sum, min, max"):
        RunConfig(metrics_reduce={"loss": "median"})


def test_reduced_metrics_and_worker_dataframe_through_the_controller(tmp_path):
    controller, _ = run(tmp_path, [[both(1, x=1), both(2, x=2), done()]])
    controller.run_config.metrics_reduce = {"rank": "sum"}
    result = controller.run()
    assert result.metrics["rank_sum"] == 1  # ranks 0 and 1
    assert list(result.metrics_dataframe["rank_sum"]) == [1, 1]
    df = result.worker_metrics_dataframe
    assert list(df["rank"]) == [0, 1, 0, 1]
    assert list(df["training_iteration"]) == [1, 1, 2, 2]
    assert list(df["x"]) == [1, 1, 2, 2]


# --- plots -------------------------------------------------------------------------------
def test_result_plot_writes_a_png_in_the_run_dir(tmp_path):
    history = [{"training_iteration": i, "loss": 1.0 / i, "accuracy": 0.3 * i,
                "time_total_s": float(i)} for i in (1, 2, 3)]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = Result(history=history, path=str(run_dir))
    path = result.plot(metrics=["loss", "accuracy"])
    assert path == str(run_dir / constants.PLOT_FILE)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    other = result.plot(path=str(tmp_path / "all.png"))  # every non-automatic metric
    assert os.path.getsize(other) > 1000
    with pytest.raises(ValueError, match="never reported"):
        result.plot(metrics=["f1"])


def test_one_curve_per_result_for_a_result_grid(tmp_path):
    from engine._internal.plotting import plot_results

    results = [Result(history=[{"training_iteration": i, "loss": lr / i} for i in (1, 2)],
                      path=str(tmp_path / f"trial_{lr}")) for lr in (1, 2)]
    path = plot_results(results, ["loss"], None, str(tmp_path))
    assert path == str(tmp_path / constants.PLOT_FILE) and os.path.getsize(path) > 1000


def test_callbacks_package_exports_and_does_not_shadow_mlflow():
    import importlib
    import subprocess
    import sys

    import engine.callbacks as cbs

    assert {n for n in cbs.__all__ if not hasattr(cbs, n)} == set()
    where = {name: getattr(cbs, name).__module__ for name in (
        "JsonLoggerCallback", "CSVLoggerCallback", "TensorBoardLoggerCallback",
        "MLflowLoggerCallback")}
    assert where == {"JsonLoggerCallback": "engine.callbacks.files",
                     "CSVLoggerCallback": "engine.callbacks.files",
                     "TensorBoardLoggerCallback": "engine.callbacks.tensorboard",
                     "MLflowLoggerCallback": "engine.callbacks.mlflow"}
    if importlib.util.find_spec("mlflow") is not None:
        # engine/callbacks/mlflow.py must not stand in for the real package, even when
        # engine.callbacks is imported first.
        code = ("import engine.callbacks, mlflow, mlflow.tracking; "
                "print(mlflow.__name__, hasattr(mlflow.tracking, 'MlflowClient'))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout.split()
        assert out == ["mlflow", "True"]
