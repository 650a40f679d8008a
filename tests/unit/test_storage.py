import json
import os

import pytest

from engine._internal.storage import Storage, redact, resolve
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

    from engine._internal.storage import memory_storage_root

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

    def open_input_stream(self, path):
        import io

        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(self.error)
        return io.BytesIO(b"payload")


NETWORK = ("When reading information for key 'k': AWS Error NETWORK_CONNECTION during "
           "GetObject operation: curlCode: 28, Timeout was reached")


def test_remote_storage_retries_transient_errors_then_succeeds(monkeypatch, caplog):
    import engine._internal.storage_retry as retry_mod

    monkeypatch.setattr(retry_mod.time, "sleep", lambda s: None)
    fs = _FlakyFS(3, NETWORK)
    with caplog.at_level("WARNING", logger="engine"):
        assert Storage(fs, "bucket/run").read_bytes("bucket/run/x") == b"payload"
    assert fs.calls == 4
    text = caplog.text
    assert "is not answering" in text and "TRAINYARD_STORAGE_RETRY_S" in text
    assert "answered again" in text


def test_remote_storage_gives_up_after_the_budget_and_never_retries_real_errors(monkeypatch):
    import engine._internal.storage_retry as retry_mod

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
