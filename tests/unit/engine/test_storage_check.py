import pyarrow.fs as pafs

from engine._internal.storage.check import ProbeResult, probe_storage, verdict
from engine._internal.storage.filesystem import Storage


def test_local_path_not_shared_with_a_worker_node_is_an_error(tmp_path):
    st = Storage.from_path(str(tmp_path))
    msg = verdict(st, [ProbeResult("10.0.0.7", sees_driver_file=False, writable=True)])
    assert "10.0.0.7" in msg and "shared filesystem" in msg and "s3://" in msg


def test_unwritable_remote_storage_names_node():
    st = Storage(pafs.SubTreeFileSystem("/tmp", pafs.LocalFileSystem()), "x")
    msg = verdict(st, [ProbeResult("10.0.0.8", True, False, "AccessDenied")])
    assert "10.0.0.8" in msg and "AccessDenied" in msg


def test_all_good_is_none(tmp_path):
    st = Storage.from_path(str(tmp_path))
    assert verdict(st, [ProbeResult("a", True, True), ProbeResult("b", True, True)]) is None


def test_probe_sees_driver_file_on_shared_disk(tmp_path):
    st = Storage.from_path(str(tmp_path))
    probe = str(tmp_path / ".probe_driver")
    st.write_bytes_atomic(probe, b"driver")
    res = probe_storage(st, probe, "127.0.0.1")
    assert res.sees_driver_file and res.writable
    assert probe_storage(st, str(tmp_path / "absent"), "x").sees_driver_file is False
