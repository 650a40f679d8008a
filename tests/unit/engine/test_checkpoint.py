import os
import pickle

import pytest

from engine import Checkpoint
from engine.exceptions import CheckpointError


def test_from_dict_round_trip():
    ckpt = Checkpoint.from_dict({"epoch": 3, "w": [1.0, 2.0]})
    assert ckpt.to_dict() == {"epoch": 3, "w": [1.0, 2.0]}
    assert ckpt.get_internal_representation() == ("local_path", ckpt.path)


def test_from_directory_and_as_directory(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"abc")
    ckpt = Checkpoint.from_directory(str(tmp_path))
    with ckpt.as_directory() as d:
        assert open(os.path.join(d, "model.bin"), "rb").read() == b"abc"
    out = ckpt.to_directory(str(tmp_path / "copy"))
    assert open(os.path.join(out, "model.bin"), "rb").read() == b"abc"


def test_from_directory_missing_dir_says_what_to_do(tmp_path):
    with pytest.raises(CheckpointError, match="no such directory"):
        Checkpoint.from_directory(str(tmp_path / "nope"))


def test_to_dict_on_directory_checkpoint_explains(tmp_path):
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(CheckpointError, match="as_directory"):
        Checkpoint.from_directory(str(tmp_path)).to_dict()


def test_checkpoint_pickles_with_path_and_metrics():
    ckpt = Checkpoint.from_dict({"a": 1})
    ckpt.metrics = {"loss": 0.5}
    clone = pickle.loads(pickle.dumps(ckpt))
    assert clone == ckpt and clone.metrics == {"loss": 0.5}
    assert clone.to_dict() == {"a": 1}


def test_from_dict_rejects_non_dict():
    with pytest.raises(CheckpointError, match="expects a dict"):
        Checkpoint.from_dict([1, 2])


def test_from_dict_format_tensors_load_safely_other_dicts_stay_compact():
    """A dict with tensors is written in torch.save's format (predictors then load it
    with weights_only=True); any other dict is a plain pickle, since torch.save's
    protocol 2 would store bytes and arrays half again as large."""
    import os

    import torch

    from engine import constants
    from engine.checkpoint import load_dict_safely

    state = Checkpoint.from_dict({"model": torch.nn.Linear(2, 1).state_dict(), "epoch": 1})
    blob = Checkpoint.from_dict({"blob": os.urandom(1 << 20)})
    with open(os.path.join(state.path, constants.DICT_CHECKPOINT_FILE), "rb") as f:
        raw = f.read()
    assert raw[:2] == b"PK" and load_dict_safely(raw)["epoch"] == 1
    size = os.path.getsize(os.path.join(blob.path, constants.DICT_CHECKPOINT_FILE))
    assert size < 1.01 * (1 << 20)
    assert len(blob.to_dict()["blob"]) == 1 << 20


def test_owns_directory_decides_whether_a_reported_directory_is_deleted(tmp_path):
    from engine._internal.worker_group.session import TrainContext, TrainSession

    (tmp_path / "model.bin").write_bytes(b"abc")
    mine = Checkpoint.from_directory(str(tmp_path))
    made = Checkpoint.from_dict({"epoch": 1})
    adopted = Checkpoint(str(tmp_path / "x"), owns_directory=True)
    assert (mine.owns_directory, made.owns_directory, adopted.owns_directory) == (
        False, True, True)
    # Reported with checkpointing off (num_to_keep=0): nothing is uploaded, and only the
    # temporary directory the engine made is removed; the user's directory stays.
    session = TrainSession(TrainContext(world_rank=0, world_size=1), storage=None,
                           attempt="t", start_iteration=0)
    session.report({"x": 1}, checkpoint=mine)
    session.report({"x": 2}, checkpoint=made)
    assert (tmp_path / "model.bin").read_bytes() == b"abc"
    assert not os.path.exists(made.path)
    # Ownership is not pickled: a copy in another process never deletes the original.
    assert pickle.loads(pickle.dumps(adopted)).owns_directory is False


def test_a_copy_that_fails_leaves_no_temporary_directory(tmp_path, monkeypatch):
    """to_directory() into a directory of its own: a source that is gone (a retention
    deleted it meanwhile) raises and leaves nothing behind."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = Checkpoint(str(tmp_path / "deleted_checkpoint"))
    with pytest.raises(OSError):
        gone.to_directory()
    assert not [p for p in os.listdir(tmp_path) if p.startswith("trainyard_ckpt_")]
