"""Issue 23, gap 6 without Ray: config checks, checkpoint metadata and URIs, Result from a
stored run, the trainer kept for restore, and the output captured to files."""

from __future__ import annotations

import json
import os
import sys
import uuid

import pytest

from engine import (Checkpoint, CheckpointConfig, ConfigError, FailureConfig, Result,
                    RunConfig)
from engine._internal.storage.filesystem import Storage
from engine._internal.worker_group.output_capture import OutputFiles, capture
from engine.config import log_file_names
from engine.exceptions import CheckpointError
from engine.trainer import DataParallelTrainer


def test_log_to_file_forms_and_bad_values() -> None:
    assert log_file_names(False) is None
    assert log_file_names(True) == ("stdout", "stderr")
    assert log_file_names("out.log") == ("out.log", "out.log")
    assert log_file_names(("o.txt", "e.txt")) == ("o.txt", "e.txt")
    for bad in (3, ("only_one",), ("/abs/out", "err"), ("../up", "err"), ""):
        with pytest.raises(ConfigError, match="log_to_file"):
            RunConfig(log_to_file=bad)


def test_fail_fast_values() -> None:
    assert FailureConfig(fail_fast="raise").max_failures == 0
    with pytest.raises(ConfigError, match="fail_fast"):
        FailureConfig(fail_fast="yes")
    with pytest.raises(ConfigError, match="not retried"):
        FailureConfig(fail_fast=True, max_failures=2)


def test_checkpoint_frequency_checks_and_precedence() -> None:
    with pytest.raises(ConfigError, match="checkpoint_frequency"):
        CheckpointConfig(checkpoint_frequency=-1)
    with pytest.raises(ConfigError, match="checkpoint_at_end"):
        CheckpointConfig(checkpoint_at_end="yes")
    assert CheckpointConfig().builtin_loop_checkpointing("X", 3, True) == (3, True)
    cc = CheckpointConfig(checkpoint_frequency=2, checkpoint_at_end=False)
    assert cc.builtin_loop_checkpointing("X", 0, True) == (2, False)


def _loop(config):  # pragma: no cover - never run here
    pass


def test_function_trainer_refuses_builtin_loop_checkpointing() -> None:
    trainer = DataParallelTrainer(_loop, run_config=RunConfig(
        checkpoint_config=CheckpointConfig(checkpoint_frequency=2)))
    with pytest.raises(ConfigError, match="report\\(metrics, checkpoint=...\\)"):
        trainer._run_spec()


def test_checkpoint_metadata_roundtrip_and_errors(tmp_path) -> None:
    ckpt = Checkpoint.from_directory(str(tmp_path))
    assert ckpt.get_metadata() == {}
    ckpt.set_metadata({"epoch": 1})
    ckpt.update_metadata({"note": "x"})
    assert Checkpoint.from_directory(str(tmp_path)).get_metadata() == {"epoch": 1,
                                                                       "note": "x"}
    with pytest.raises(CheckpointError, match="JSON"):
        ckpt.set_metadata({"obj": object()})
    with pytest.raises(CheckpointError, match="dict"):
        ckpt.update_metadata([1])


def test_to_uri_copies_and_refuses_a_used_target(tmp_path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "w.txt").write_text("1")
    ckpt = Checkpoint.from_directory(str(src))
    uri = ckpt.to_uri(f"memory://unit_to_uri/{uuid.uuid4().hex}")
    assert Checkpoint.from_uri(uri).get_metadata() == {}
    with Checkpoint.from_uri(uri).as_directory() as d:
        assert open(os.path.join(d, "w.txt")).read() == "1"
    with pytest.raises(CheckpointError, match="already holds files"):
        ckpt.to_uri(uri)


def _write_run(root, state="FINISHED", error=None) -> str:
    run = root / "run"
    for i, loss in enumerate([3.0, 1.0, float("nan")]):
        (run / f"checkpoint_{i:06d}").mkdir(parents=True)
    record = {"version": 1, "state": state, "config": {"lr": 0.1}, "failures": 1,
              "error": error, "history": [{"training_iteration": i + 1, "loss": v}
                                          for i, v in enumerate([3.0, 1.0, float("nan")])],
              "checkpoints": {"next_index": 3, "checkpoints": [
                  {"index": i, "iteration": i + 1, "dir_name": f"checkpoint_{i:06d}",
                   "metrics": {"loss": v}} for i, v in enumerate([3.0, 1.0, float("nan")])]}}
    (run / "run_state.json").write_text(json.dumps(record))
    return str(run)


def test_result_from_path_and_best_checkpoint(tmp_path) -> None:
    result = Result.from_path(_write_run(tmp_path))
    assert result.metrics["training_iteration"] == 3 and result.metrics["done"] is True
    assert result.config == {"lr": 0.1} and result.num_failures == 1
    assert result.checkpoint.path.endswith("checkpoint_000002")
    assert result.get_best_checkpoint("loss", "min").path.endswith("checkpoint_000001")
    assert result.get_best_checkpoint("loss", "max").path.endswith("checkpoint_000000")
    with pytest.raises(ValueError, match="mode"):
        result.get_best_checkpoint("loss", "best")
    with pytest.raises(RuntimeError, match="'acc'"):
        result.get_best_checkpoint("acc", "max")
    with pytest.raises(FileNotFoundError, match="run_state.json"):
        Result.from_path(str(tmp_path / "nothing"))


def test_result_from_path_of_a_failed_run(tmp_path) -> None:
    result = Result.from_path(_write_run(tmp_path, "ERRORED", "boom"))
    assert "boom" in str(result.error) and result.metrics["done"] is False


def test_restore_errors(tmp_path) -> None:
    from engine._internal.execution.trainer_state import save_trainer

    with pytest.raises(FileNotFoundError, match="can_restore"):
        DataParallelTrainer.restore(str(tmp_path))
    assert not DataParallelTrainer.can_restore(str(tmp_path))
    import pandas as pd

    trainer = DataParallelTrainer(_loop, datasets={"train": pd.DataFrame({"a": [1]}),
                                                   "val": str(tmp_path / "v.csv")})
    save_trainer(trainer, Storage.from_path(str(tmp_path)))
    assert DataParallelTrainer.can_restore(str(tmp_path))
    with pytest.raises(ConfigError, match="datasets=\\{'train'"):
        DataParallelTrainer.restore(str(tmp_path))
    with pytest.raises(ConfigError, match="cannot change"):
        DataParallelTrainer.restore(str(tmp_path), datasets={"train": pd.DataFrame()},
                                    run_config=RunConfig())
    from engine.sklearn import SklearnTrainer

    with pytest.raises(ConfigError, match="DataParallelTrainer.restore"):
        SklearnTrainer.restore(str(tmp_path))
    restored = DataParallelTrainer.restore(str(tmp_path),
                                           datasets={"train": pd.DataFrame({"a": [2]})})
    assert restored.run_config.name == tmp_path.name
    assert restored.run_config.storage_path == str(tmp_path.parent)
    assert set(restored.datasets) == {"train", "val"}


def test_capture_tees_streams_per_rank(tmp_path, capsys) -> None:
    storage = Storage.from_path(str(tmp_path))
    with capture(OutputFiles(storage, ("out", "err"), rank=1)):
        print("to out")
        print("to err", file=sys.stderr)
    assert (tmp_path / "out.rank1").read_text() == "to out\n"
    assert (tmp_path / "err.rank1").read_text() == "to err\n"
    assert "to out" in capsys.readouterr().out  # the console still gets it
    with capture(OutputFiles(storage, ("both", "both"))):
        print("a")
        print("b", file=sys.stderr)
    assert (tmp_path / "both").read_text() == "a\nb\n"
