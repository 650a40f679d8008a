"""Callbacks on real training runs (real Ray, TorchTrainer with 2 workers): the seed's
custom LoggerCallback, the files the default loggers write, TensorBoard event files,
a real local MLflow store, metrics from every rank, plots and a broken callback."""

from __future__ import annotations

import csv
import json
import os
import time
from typing import Dict

import pytest

import engine
from engine import Checkpoint, RunConfig, ScalingConfig, constants, session
from engine.callbacks import (Callback, LoggerCallback, MLflowLoggerCallback,
                              TensorBoardLoggerCallback)
from engine.torch import TorchTrainer
from tests.support.event_files import hparams, read_events, scalars

# The module's fits check what training produced, not how workers start: they run on
# warm pooled workers (tests/README.md, "How a new test pays for itself").
pytestmark = pytest.mark.usefixtures("pooled_workers")


class LoggingCallback(LoggerCallback):
    """The seed's example, as written (no super().__init__())."""

    def __init__(self) -> None:
        self.results = []

    def log_trial_result(self, iteration: int, trial, result: Dict):
        self.results.append(trial.last_result)


def _three_epochs():
    for i in range(3):
        session.report({"epoch": i})


def _fit(train_func, storage_path, config=None, **run_kwargs):
    return TorchTrainer(train_func, train_loop_config=config,
                        scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(storage_path=storage_path, **run_kwargs)).fit()


def test_seed_logging_callback(ray_start_4_cpus, storage_path):
    callback = LoggingCallback()
    result = _fit(_three_epochs, storage_path, callbacks=[callback])
    print("\n".join([str(x) for x in callback.results]))
    assert [r["epoch"] for r in callback.results] == [0, 1, 2]
    assert [r["training_iteration"] for r in callback.results] == [1, 2, 3]
    for r in callback.results:
        for key in ("trial_id", "experiment_id", "date", "timestamp", "pid", "hostname",
                    "node_ip", "config", "time_this_iter_s", "experiment_tag"):
            assert key in r, key
        assert r["trial_id"] == result.metrics["trial_id"]


def _changing_metrics(config):
    rank = engine.get_context().get_world_rank()
    for i in range(3):
        metrics = {"loss": 1.0 / (i + 1) + rank, "samples": 10 * (rank + 1),
                   "val": {"acc": 0.25 * (i + 1)}}
        if i == 2:
            metrics["late"] = "yes"
        ckpt = Checkpoint.from_dict({"i": i}) if i == 2 else None
        session.report(metrics, checkpoint=ckpt)


def test_default_files_every_rank_and_plot(ray_start_4_cpus, storage_path):
    result = _fit(_changing_metrics, storage_path, config={"lr": 0.1},
                  metrics_reduce={"loss": "mean", "samples": "sum"})
    # result.json: rank 0's metrics of each report, automatic fields included.
    with open(os.path.join(result.path, constants.RESULT_JSON_FILE)) as f:
        lines = [json.loads(line) for line in f]
    assert [row["training_iteration"] for row in lines] == [1, 2, 3]
    assert lines[0]["config"] == {"lr": 0.1} and lines[0]["val"] == {"acc": 0.25}
    assert lines[2]["late"] == "yes" and "late" not in lines[0]
    # progress.csv: the late key widened the header, every row stays aligned.
    with open(os.path.join(result.path, constants.PROGRESS_CSV_FILE)) as f:
        rows = list(csv.DictReader(f))
    assert [r["late"] for r in rows] == ["", "", "yes"]
    assert [float(r["val/acc"]) for r in rows] == [0.25, 0.5, 0.75]
    assert rows[0]["trial_id"] == result.metrics["trial_id"]
    # Reductions over both ranks sit next to rank 0's values.
    assert result.metrics["loss"] == pytest.approx(1 / 3)
    assert result.metrics["loss_mean"] == pytest.approx(1 / 3 + 0.5)
    assert result.metrics["samples_sum"] == 30
    assert list(result.metrics_dataframe["samples_sum"]) == [30, 30, 30]
    # Every rank's rows.
    df = result.worker_metrics_dataframe
    assert list(df["rank"]) == [0, 1] * 3
    assert list(df["samples"]) == [10, 20] * 3
    assert df[df["rank"] == 0]["pid"].nunique() == 1
    assert set(df[df["rank"] == 0]["pid"]) != set(df[df["rank"] == 1]["pid"])
    # A learning curve kept in the run directory.
    path = result.plot(metrics=["loss", "val/acc"])
    assert path == os.path.join(result.path, constants.PLOT_FILE)
    with open(path, "rb") as f:
        assert f.read(4) == b"\x89PNG"


def _printing():
    # Distinct words per rank: Ray collapses lines that differ only in numbers.
    rank = engine.get_context().get_world_rank()
    print(f"hello from the {['first', 'second'][rank]} train loop", flush=True)
    for i in range(2):
        session.report({"loss": 1.0 / (i + 1)})


def test_progress_lines_and_rank_prefixed_worker_output(ray_start_4_cpus, storage_path,
                                                         capfd):
    result = _fit(_printing, storage_path, name="progress", verbose=1)
    # Ray forwards the workers' output from their log files, a moment later.
    seen, deadline = "", time.monotonic() + 20
    while time.monotonic() < deadline:
        captured = capfd.readouterr()
        seen += captured.out + captured.err
        # Both ranks' own lines: a line that another process left in the Ray session's
        # logs may name a rank too, and come first.
        if all(f"hello from the {word} train loop" in seen for word in ("first", "second")):
            break
        time.sleep(0.2)
    assert f"== progress: 2 workers, run directory {result.path}" in seen
    assert "[progress] iter 2 | loss 0.5 |" in seen
    assert "== progress: finished after " in seen
    for rank, word in enumerate(["first", "second"]):
        lines = [line for line in seen.splitlines()
                 if f"hello from the {word} train loop" in line]
        assert lines and f"(rank {rank} pid=" in lines[0], seen[-3000:]


def test_tensorboard_event_files(ray_start_4_cpus, storage_path):
    result = _fit(_changing_metrics, storage_path, config={"lr": 0.1, "opt": {"m": 0.9}},
                  callbacks=[TensorBoardLoggerCallback()])
    events = read_events(result.path)
    curves = scalars(events)
    assert [step for step, _ in curves["loss"]] == [1, 2, 3]
    assert [v for _, v in curves["val/acc"]] == pytest.approx([0.25, 0.5, 0.75])
    assert "late" not in curves  # not a number
    assert hparams(events) == {"lr": pytest.approx(0.1), "opt/m": pytest.approx(0.9)}
    assert result.callback_errors == []


def _with_checkpoints(config):
    for i in range(3):
        session.report({"loss": 1.0 / (i + 1), "epoch": i},
                       checkpoint=Checkpoint.from_dict({"epoch": i}))


def test_mlflow_against_a_local_store(ray_start_4_cpus, storage_path, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    callback = MLflowLoggerCallback(tracking_uri=uri, experiment_name="trainyard_test",
                                    tags={"team": "ml"}, save_artifact=True,
                                    artifact_location=str(tmp_path / "artifacts"))
    result = _fit(_with_checkpoints, storage_path, config={"lr": 0.01, "net": {"width": 8}},
                  callbacks=[callback])
    assert result.callback_errors == []

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("trainyard_test")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.info.run_name == os.path.basename(result.path)
    assert run.data.tags["team"] == "ml"
    assert run.data.tags["trial_id"] == result.metrics["trial_id"]
    assert run.data.params == {"lr": "0.01", "net/width": "8"}
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
        (1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "checkpoint")]
    assert f"checkpoint/{constants.DICT_CHECKPOINT_FILE}" in artifacts
    assert f"checkpoint/{constants.COMMIT_MARKER}" not in artifacts
    local = client.download_artifacts(run.info.run_id, "checkpoint", str(tmp_path / "dl"))
    assert Checkpoint.from_directory(local).to_dict() == {"epoch": 2}


def test_a_raising_callback_does_not_stop_training(ray_start_4_cpus, storage_path):
    class Broken(Callback):
        def on_report(self, metrics, all_metrics):
            raise KeyError("no such dashboard")

    seen = LoggingCallback()
    result = _fit(_three_epochs, storage_path, callbacks=[Broken(), seen])
    assert result.metrics["epoch"] == 2 and result.error is None
    assert [r["epoch"] for r in seen.results] == [0, 1, 2]
    assert len(result.callback_errors) == 1
    assert result.callback_errors[0].startswith("Broken.on_report raised KeyError")
