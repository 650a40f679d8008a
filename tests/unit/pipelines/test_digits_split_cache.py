"""The digits split is computed once per machine and read with numpy afterwards: a
training worker that finds it cached does not import scikit-learn."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pipelines import digits

REPO = os.path.abspath(os.path.join(__file__, *[os.pardir] * 4))

# What a fresh worker process does: load the split, say whether scikit-learn came with it.
_WORKER = """
import json, sys
from pipelines.digits import load_digits_split
X_train, y_train, X_val, y_val = load_digits_split()
print(json.dumps({"sklearn": "sklearn" in sys.modules,
                  "shapes": [list(a.shape) for a in (X_train, y_train, X_val, y_val)],
                  "dtypes": [str(a.dtype) for a in (X_train, y_train, X_val, y_val)],
                  "sum": float(X_train.sum()) + float(y_val.sum())}))
"""


def _fresh_process(cache: str) -> dict:
    env = dict(os.environ, TRAINYARD_DATA_CACHE=cache,
               PYTHONPATH=os.pathsep.join(p for p in [REPO, os.environ.get("PYTHONPATH")] if p))
    out = subprocess.run([sys.executable, "-c", _WORKER], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _uncached(monkeypatch) -> tuple:
    monkeypatch.setenv("TRAINYARD_DATA_CACHE", "")
    return digits.load_digits_split()


def _assert_same(a: tuple, b: tuple) -> None:
    assert len(a) == len(b) == 4
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def test_the_second_process_reads_the_split_without_scikit_learn(tmp_path):
    cache = str(tmp_path / "cache")
    first = _fresh_process(cache)
    assert first["sklearn"] is True  # computed it, and cached it
    assert len(os.listdir(cache)) == 1
    second = _fresh_process(cache)
    assert second["sklearn"] is False
    assert second == {**first, "sklearn": False}
    assert second["dtypes"] == ["float32", "int64", "float32", "int64"]


def test_the_cached_split_is_the_computed_one(tmp_path, monkeypatch):
    expected = _uncached(monkeypatch)
    monkeypatch.setenv("TRAINYARD_DATA_CACHE", str(tmp_path))
    written = digits.load_digits_split()
    read = digits.load_digits_split()
    _assert_same(written, expected)
    _assert_same(read, expected)
    # Another split has its own file.
    other = digits.load_digits_split(test_size=0.3, seed=1)
    assert len(os.listdir(tmp_path)) == 2
    assert len(other[0]) != len(expected[0])
    read[0][0, 0] = -1.0  # the caller's arrays are its own: the cache is not changed
    _assert_same(digits.load_digits_split(), expected)


def test_a_damaged_cache_file_is_computed_and_written_again(tmp_path, monkeypatch, caplog):
    expected = _uncached(monkeypatch)
    monkeypatch.setenv("TRAINYARD_DATA_CACHE", str(tmp_path))
    digits.load_digits_split()
    (path,) = tmp_path.iterdir()
    path.write_bytes(path.read_bytes()[:200])  # an interrupted copy, say
    _assert_same(digits.load_digits_split(), expected)
    assert "unreadable digits split cache" in caplog.text
    _assert_same(digits.load_digits_split(), expected)  # and the file is whole again
    np.load(path).close()


def test_an_unwritable_cache_still_gives_the_split(tmp_path, monkeypatch):
    expected = _uncached(monkeypatch)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("TRAINYARD_DATA_CACHE", str(blocker / "data"))
    _assert_same(digits.load_digits_split(), expected)
    assert blocker.read_text() == ""


def test_the_default_cache_is_under_the_users_cache_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("TRAINYARD_DATA_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    path = digits._split_cache_path(0.2, 0)
    assert path is not None and path.startswith(str(tmp_path / ".cache" / "trainyard" / "data"))
    monkeypatch.setenv("TRAINYARD_DATA_CACHE", "")
    assert digits._split_cache_path(0.2, 0) is None


@pytest.mark.parametrize("test_size", [0.2, 0.25])
def test_the_file_name_names_what_the_split_depends_on(monkeypatch, tmp_path, test_size):
    monkeypatch.setenv("TRAINYARD_DATA_CACHE", str(tmp_path))
    from importlib.metadata import version

    name = os.path.basename(digits._split_cache_path(test_size, 7))
    assert version("scikit-learn") in name and repr(test_size) in name and "seed7" in name
