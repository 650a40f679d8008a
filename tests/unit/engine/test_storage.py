import json
import os

import pytest

from engine._internal.storage.filesystem import Storage, redact, resolve
from engine.exceptions import StorageError


def test_relative_path_is_rejected_with_absolute_suggestion():
    with pytest.raises(StorageError, match="relative path.*absolute"):
        resolve("results/here")


def test_unknown_scheme():
    with pytest.raises(StorageError, match="unsupported scheme"):
        resolve("ftp://host/x")


def test_redact_strips_credentials_and_query():
    uri = "s3://AKIA:secret@bucket/prefix?endpoint_override=localhost:9000"
    assert redact(uri) == "s3://bucket/prefix"


def test_atomic_json_write_and_read(tmp_path):
    st = Storage.from_path(str(tmp_path))
    path = os.path.join(st.root, "run", "state.json")
    st.write_json_atomic(path, {"v": 1})
    st.write_json_atomic(path, {"v": 2})
    assert st.read_json(path) == {"v": 2}
    assert [n for n in os.listdir(os.path.dirname(path)) if n.endswith(".tmp")] == []


def test_upload_and_list(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("b")
    st = Storage.from_path(str(tmp_path / "store"))
    files = st.upload_dir(str(src), os.path.join(st.root, "dst"))
    assert files == ["a.txt", os.path.join("sub", "b.txt")]
    assert st.list_dir(os.path.join(st.root, "dst")) == ["a.txt", "sub"]


def test_unwritable_storage_is_clear_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    try:
        if os.access(str(ro), os.W_OK):
            pytest.skip("running as a user that can write anywhere (root)")
        with pytest.raises(StorageError, match="writable"):
            Storage.from_path(str(ro / "x")).check_writable()
    finally:
        os.chmod(ro, 0o700)


def test_file_in_the_way_is_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match="storage_path"):
        Storage.from_path(str(blocker / "runs")).check_writable()


def test_memory_uri_is_a_ram_backed_directory_shared_by_processes(monkeypatch, tmp_path):
    import pyarrow.fs as pafs

    from engine._internal.storage.filesystem import memory_storage_root

    monkeypatch.delenv("TRAINYARD_MEMORY_STORAGE_ROOT", raising=False)
    assert memory_storage_root() == "/dev/shm/trainyard-memory"  # a tmpfs on Linux
    monkeypatch.setenv("TRAINYARD_MEMORY_STORAGE_ROOT", str(tmp_path))
    fs, path = resolve("memory://experiments/run1")
    # A plain local filesystem over that directory: every process of this machine
    # (driver, workers) sees the same files, unlike pyarrow's per-process memory://.
    assert isinstance(fs, pafs.LocalFileSystem)
    assert path == str(tmp_path / "experiments" / "run1")
    for bad in ("memory://", "memory://a/../b"):
        with pytest.raises(StorageError, match="memory://experiments"):
            resolve(bad)


class _FlakyFS:
    """A remote filesystem stand-in whose reads fail ``failures`` times first."""

    type_name = "s3"

    def __init__(self, failures: int, error: str) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def open_input_file(self, path):
        import io

        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(self.error)
        f = io.BytesIO(b"payload")
        f.size = lambda: len(b"payload")
        return f

    def get_file_info(self, path):
        import types

        return types.SimpleNamespace(size=len(b"payload"))


class _ReplacedFS:
    """An object store stand-in (no boto3 reader) whose record is replaced by a longer
    version while the first read is under way: that read takes the old size and gets
    the new version cut at it, as pyarrow's ranged S3 reads do."""

    type_name = "gcs"

    def __init__(self) -> None:
        self.old, self.new, self.reads = b'{"v": 1}', b'{"v": 2, "more": 1}', 0

    def open_input_file(self, path):
        import io

        self.reads += 1
        size = len(self.old if self.reads == 1 else self.new)
        f = io.BytesIO(self.new[:size])
        f.size = lambda: size
        return f

    def get_file_info(self, path):
        import types

        return types.SimpleNamespace(size=len(self.new))


def test_a_read_that_overlapped_a_replace_is_taken_again_where_no_whole_get_exists():
    fs = _ReplacedFS()
    assert Storage(fs, "bucket/run").read_json("bucket/run/run_state.json") == \
        {"v": 2, "more": 1}
    assert fs.reads == 2  # the torn first read was not returned


NETWORK = ("When reading information for key 'k': AWS Error NETWORK_CONNECTION during "
           "GetObject operation: curlCode: 28, Timeout was reached")


def test_remote_storage_retries_transient_errors_then_succeeds(monkeypatch, caplog):
    import engine._internal.storage.retry as retry_mod

    monkeypatch.setattr(retry_mod.time, "sleep", lambda s: None)
    fs = _FlakyFS(3, NETWORK)
    with caplog.at_level("WARNING", logger="engine"):
        assert Storage(fs, "bucket/run").read_bytes("bucket/run/x") == b"payload"
    assert fs.calls == 4
    text = caplog.text
    assert "is not answering" in text and "TRAINYARD_STORAGE_RETRY_S" in text
    assert "answered again" in text


def test_remote_storage_gives_up_after_the_budget_and_never_retries_real_errors(monkeypatch):
    import engine._internal.storage.retry as retry_mod

    monkeypatch.setattr(retry_mod.time, "sleep", lambda s: None)
    monkeypatch.setenv("TRAINYARD_STORAGE_RETRY_S", "0")
    fs = _FlakyFS(100, NETWORK)
    with pytest.raises(OSError, match="NETWORK_CONNECTION"):
        Storage(fs, "bucket/run").read_bytes("bucket/run/x")
    assert fs.calls == 1
    monkeypatch.setenv("TRAINYARD_STORAGE_RETRY_S", "60")
    denied = _FlakyFS(100, "AWS Error ACCESS_DENIED during GetObject operation")
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        Storage(denied, "bucket/run").read_bytes("bucket/run/x")
    assert denied.calls == 1  # not transient: no retry


# --- default_root -------------------------------------------------------------------
def test_default_root_prefers_the_argument_then_the_env_then_the_default(monkeypatch,
                                                                         tmp_path):
    from engine import constants
    from engine.storage import default_root

    monkeypatch.delenv(constants.STORAGE_PATH_ENV_VAR, raising=False)
    assert default_root() == os.path.expanduser(os.path.join("~", "trainyard_results"))
    monkeypatch.setenv(constants.STORAGE_PATH_ENV_VAR, "")  # empty: as if unset
    assert default_root() == os.path.expanduser(os.path.join("~", "trainyard_results"))
    monkeypatch.setenv(constants.STORAGE_PATH_ENV_VAR, str(tmp_path / "env"))
    assert default_root() == str(tmp_path / "env")
    assert default_root(str(tmp_path / "given") + "/") == str(tmp_path / "given")
    assert default_root(f"file://{tmp_path}/x/../y") == str(tmp_path / "y")
    uri = "s3://bucket/runs?endpoint_override=host:9000&scheme=http"
    assert default_root(uri) == uri  # the query opens the filesystem: kept
    assert default_root("memory://exp") == "memory://exp"


def test_default_root_refuses_a_relative_path_and_says_where_it_came_from(monkeypatch):
    import pyarrow.fs as pafs

    from engine import constants
    from engine.storage import default_root

    with pytest.raises(StorageError, match=r"storage_path 'results' is a relative path.*"
                                           r"absolute"):
        default_root("results")
    monkeypatch.setenv(constants.STORAGE_PATH_ENV_VAR, "results")
    with pytest.raises(StorageError, match=r"\$TRAINYARD_STORAGE_PATH='results' is a "
                                           r"relative path"):
        default_root()
    # A path inside an explicit filesystem (RunConfig.storage_filesystem) is its own.
    assert default_root("bucket/runs", pafs.LocalFileSystem()) == "bucket/runs"


# --- the atomic directory commit ------------------------------------------------------
def _staged(st: Storage, name: str, files: dict) -> str:
    staging = os.path.join(st.root, ".staging", name)
    for rel, text in files.items():
        path = os.path.join(staging, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return staging


def _tree(path: str) -> dict:
    out = {}
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            out[os.path.relpath(full, path)] = open(full).read()
    return out


def test_commit_dir_publishes_the_files_with_their_marker(tmp_path):
    from engine import constants

    st = Storage.from_path(str(tmp_path))
    dest = os.path.join(st.root, "checkpoint_000000")
    assert st.read_commit_marker(dest) is None
    staging = _staged(st, "a", {"model.pt": "w0", "sub/opt.pt": "o0"})
    assert st.commit_dir(staging, dest, {"index": 0}) == {"index": 0}
    assert st.read_commit_marker(dest) == {"index": 0}
    assert _tree(dest) == {"model.pt": "w0", "sub/opt.pt": "o0",
                           constants.COMMIT_MARKER: json.dumps({"index": 0}, indent=1)}
    assert not os.path.exists(staging)


def test_commit_dir_keeps_a_committed_copy_unless_told_to_replace_it(tmp_path):
    st = Storage.from_path(str(tmp_path))
    dest = os.path.join(st.root, "data-ab12")
    st.commit_dir(_staged(st, "a", {"part-0": "first"}), dest, {"by": "a"})
    # A second writer of the same name: the committed copy wins, its staging goes.
    second = _staged(st, "b", {"part-0": "second"})
    assert st.commit_dir(second, dest, {"by": "b"}) == {"by": "a"}
    assert open(os.path.join(dest, "part-0")).read() == "first"
    assert not os.path.exists(second)
    third = _staged(st, "c", {"part-1": "third"})
    assert st.commit_dir(third, dest, {"by": "c"}, replace=True) == {"by": "c"}
    assert sorted(os.listdir(dest)) == [".trainyard_committed", "part-1"]


def test_commit_dir_replaces_uncommitted_debris(tmp_path):
    st = Storage.from_path(str(tmp_path))
    dest = os.path.join(st.root, "data-ab12")
    os.makedirs(dest)
    with open(os.path.join(dest, "part-0"), "w") as f:
        f.write("torn")  # a commit or a deletion cut short: files, no marker
    st.commit_dir(_staged(st, "a", {"part-0": "whole"}), dest, {"n": 1})
    assert open(os.path.join(dest, "part-0")).read() == "whole"
    assert st.read_commit_marker(dest) == {"n": 1}


_COMMIT_AND_DIE = """
import os, signal, sys
from engine.storage import Storage

st = Storage.from_path(sys.argv[1])
staging, dest, fatal = sys.argv[2], sys.argv[3], sys.argv[4]
real = getattr(os, fatal)

def die(*args):
    if fatal == "replace" and not args[1].endswith(".trainyard_committed"):
        return real(*args)
    os.kill(os.getpid(), signal.SIGKILL)

setattr(os, fatal, die)
st.commit_dir(staging, dest, {"index": 7})
"""


@pytest.mark.parametrize("fatal", ["replace", "rename"])
def test_a_commit_killed_midway_leaves_nothing_that_reads_as_committed(tmp_path, fatal):
    """SIGKILL the committing process as it makes the marker durable (``replace``) or
    as it renames the directory into place (``rename``): the destination does not read
    as committed, and the next commit goes through."""
    import subprocess
    import sys

    from tests.conftest import REPO

    st = Storage.from_path(str(tmp_path))
    dest = os.path.join(st.root, "checkpoint_000007")
    staging = _staged(st, "killed", {"model.pt": "w7"})
    proc = subprocess.run([sys.executable, "-c", _COMMIT_AND_DIE, st.root, staging, dest,
                           fatal], env=dict(os.environ, PYTHONPATH=REPO),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert st.read_commit_marker(dest) is None
    assert not os.path.exists(dest)
    again = _staged(st, "again", {"model.pt": "w7"})
    assert st.commit_dir(again, dest, {"index": 7}) == {"index": 7}
    assert st.read_commit_marker(dest) == {"index": 7}
