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
