"""storage.py and Checkpoint against a real S3-compatible server (moto) on loopback."""

import os
import pickle
import subprocess
import sys

import pyarrow.fs as pafs
import pytest

from engine import Checkpoint, constants
from engine._internal.storage.filesystem import Storage, redact, resolve, scrub
from engine.exceptions import StorageError
from tests.conftest import FAKE_AWS_SECRET, REPO, _free_port


def _key(s3_storage_path: str) -> str:
    """The object-key prefix of an ``s3://bucket/key?...`` URI."""
    return s3_storage_path.split("?", 1)[0].split("/", 3)[3]


@pytest.fixture
def st(s3_storage_path):
    return Storage.from_path(s3_storage_path)


def test_resolve_keeps_endpoint_in_filesystem_and_hides_it_in_display(s3_server,
                                                                      s3_storage_path):
    fs, path = resolve(s3_storage_path)
    assert isinstance(fs, pafs.S3FileSystem)
    assert path == f"{s3_server.bucket}/{_key(s3_storage_path)}"
    shown = Storage(fs, path).display()
    assert shown == f"s3://{path}" and "?" not in shown and s3_server.endpoint not in shown
    # The filesystem pickles its endpoint: a worker or a fresh process reaches the server.
    clone = pickle.loads(pickle.dumps(fs))
    assert clone.get_file_info(s3_server.bucket).type == pafs.FileType.Directory


def test_atomic_json_write_and_read(st, s3_server, s3_storage_path):
    path = f"{st.root}/run/state.json"
    st.write_json_atomic(path, {"v": 1})
    st.write_json_atomic(path, {"v": 2})
    assert st.read_json(path) == {"v": 2}
    assert st.read_json(f"{st.root}/run/absent.json") is None
    # One object, no temp or directory-marker objects beside it.
    assert s3_server.keys(_key(s3_storage_path)) == [f"{_key(s3_storage_path)}/run/state.json"]


def test_a_record_read_while_its_writer_replaces_it_is_one_version_whole(st):
    """A run record on S3 is replaced whole by its driver while other processes read it
    (a status listing, a resuming driver, an Airflow trigger). pyarrow's S3 reads take
    the object's size when they open it and then fetch that many bytes, so a read that
    overlaps a replace by a longer version got the new version cut at the old length: a
    torn JSON. Every read must give one version or the other, whole, however fast the
    writer goes: a read is one GET through boto3 (``storage_s3``), which S3 answers from
    one version. (A read that compared sizes before and after, and took itself again
    when they differed, still gave up on a writer this fast on a busy machine.)"""
    import threading

    path = f"{st.root}/run/run_state.json"
    short, long = {"state": "RUNNING"}, {"state": "RUNNING", "history": ["x" * 40] * 20}
    st.write_json_atomic(path, short)
    stop = threading.Event()

    def replace_again_and_again():
        while not stop.is_set():
            for doc in (long, short):
                st.write_json_atomic(path, doc)

    writer = threading.Thread(target=replace_again_and_again, daemon=True)
    writer.start()
    try:
        seen = [st.read_json(path) for _ in range(300)]
    finally:
        stop.set()
        writer.join(timeout=60)
    assert all(doc in (short, long) for doc in seen)
    assert short in seen and long in seen  # the reads did overlap the replaces


def test_update_json_is_a_compare_and_swap_against_another_writer(st, s3_storage_path):
    """A read-modify-write whose object another process replaced between its read and
    its PUT: the conditional PUT is refused, and the change is made again on top of
    the other writer's version; nothing the other wrote is lost."""
    path = f"{st.root}/models/production.json"
    other = Storage.from_path(s3_storage_path)  # a second writer, its own client
    st.write_json_atomic(path, {"writers": ["first"]})
    seen = []

    def add(current):
        seen.append(list(current["writers"]))
        if len(seen) == 1:  # the other writer's update lands between read and write
            other.update_json(path, lambda c: {"writers": c["writers"] + ["other"]})
        return {"writers": current["writers"] + ["mine"]}

    assert st.update_json(path, add) == {"writers": ["first", "other", "mine"]}
    assert seen == [["first"], ["first", "other"]]
    assert st.read_json(path) == {"writers": ["first", "other", "mine"]}
    # A new file: created only if nobody else created it meanwhile (If-None-Match).
    fresh = f"{st.root}/models/staging.json"
    assert st.update_json(fresh, lambda c: {"was": c}) == {"was": None}
    # What change() raises leaves the file as it was.
    with pytest.raises(KeyError):
        st.update_json(fresh, lambda c: c["missing"])
    assert st.read_json(fresh) == {"was": None}


def test_without_boto3_reads_go_through_pyarrow_and_say_so_once(st, monkeypatch, caplog):
    """boto3 comes with ``trainyard[s3]``; without it S3 is read through pyarrow alone,
    with one warning a process that a read overlapping a replace is only retried."""
    import engine._internal.storage.filesystem as storage_mod
    import engine._internal.storage.s3 as s3_mod

    def no_boto3(opts):
        raise ImportError("No module named 'boto3'")

    monkeypatch.setattr(s3_mod, "_clients", {})
    monkeypatch.setattr(s3_mod, "_new_client", no_boto3)
    monkeypatch.setattr(storage_mod, "_warned_no_sdk", [])
    st.write_json_atomic(f"{st.root}/a.json", {"v": 1})
    with caplog.at_level("WARNING", logger="engine"):
        assert st.read_json(f"{st.root}/a.json") == {"v": 1}
        assert st.read_json(f"{st.root}/a.json") == {"v": 1}
        assert st.read_json(f"{st.root}/absent.json") is None
    warned = [r for r in caplog.records if "through pyarrow only" in r.getMessage()]
    assert len(warned) == 1 and "trainyard[s3]" in warned[0].getMessage()


def _in_a_forked_child(fn):
    """``fn()``'s value, computed in a forked copy of this process."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer and leave without running pytest's exit handlers
        try:
            os.write(write, str(fn()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        out = answer.read()
    os.waitpid(pid, 0)
    return int(out)


def test_the_boto3_client_takes_the_filesystems_endpoint_keys_and_options(s3_server):
    """The client that reads whole objects talks to the same server, with the same
    keys, timeouts and path-style addressing as the pyarrow filesystem; one client per
    set of options; an assumed role (which it is not given) keeps reads on pyarrow."""
    import engine._internal.storage.s3 as s3_mod

    fs = pafs.S3FileSystem(endpoint_override=s3_server.endpoint.split("://")[-1],
                           scheme="http", access_key="k", secret_key=FAKE_AWS_SECRET,
                           region="eu-west-1", connect_timeout=3, request_timeout=7)
    client = s3_mod.client_for(fs)
    assert client is s3_mod.client_for(pickle.loads(pickle.dumps(fs)))
    child = _in_a_forked_child(lambda: id(s3_mod.client_for(fs)))
    assert child != id(client)  # a fork gets a client (and connections) of its own
    config = client.meta.config
    assert client.meta.endpoint_url == f"http://{s3_server.endpoint.split('://')[-1]}"
    assert client.meta.region_name == "eu-west-1"
    assert (config.connect_timeout, config.read_timeout) == (3, 7)
    assert config.s3["addressing_style"] == "path"
    assert config.retries["total_max_attempts"] == s3_mod.SDK_ATTEMPTS
    assert client._request_signer._credentials.access_key == "k"
    from botocore import UNSIGNED

    anonymous = s3_mod.client_for(pafs.S3FileSystem(anonymous=True, region="us-east-1"))
    assert anonymous.meta.config.signature_version is UNSIGNED
    assert anonymous.meta.config.s3["addressing_style"] == "auto"
    # (An S3FileSystem with a role asks STS for it as it is made, which takes a minute
    # to fail offline: the options it would pickle are given directly.)
    with pytest.raises(NotImplementedError, match="role_arn"):
        s3_mod._new_client({"role_arn": "arn:aws:iam::1:role/r", "region": "us-east-1"})


def test_upload_list_download(st, s3_server, s3_storage_path, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("b")
    (src / "big.bin").write_bytes(os.urandom(9 * 1024 * 1024))  # more than one chunk
    dest = f"{st.root}/dst"
    files = st.upload_dir(str(src), dest)
    assert files == ["a.txt", "big.bin", "sub/b.txt"]
    assert st.list_dir(dest) == ["a.txt", "big.bin", "sub"]
    assert st.list_files(dest) == ["a.txt", "big.bin", "sub/b.txt"]
    assert st.list_dir(f"{st.root}/nothing") == [] and st.list_files(f"{st.root}/no") == []
    assert st.is_dir(dest) and st.exists(f"{dest}/a.txt") and not st.exists(f"{dest}/z")
    prefix = _key(s3_storage_path)
    assert s3_server.keys(prefix) == [f"{prefix}/dst/{f}" for f in files]  # no dir markers
    out = tmp_path / "out"
    st.download_dir(dest, str(out))
    assert (out / "a.txt").read_text() == "a" and (out / "sub" / "b.txt").read_text() == "b"
    assert (out / "big.bin").read_bytes() == (src / "big.bin").read_bytes()
    with pytest.raises(FileNotFoundError):
        st.download_dir(f"{st.root}/missing", str(tmp_path / "out2"))


def test_move_file_and_directory(st, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a").write_text("a")
    (src / "sub" / "b").write_text("b")
    st.upload_dir(str(src), f"{st.root}/staging")
    st.move(f"{st.root}/staging/a", f"{st.root}/one/a")
    assert st.read_bytes(f"{st.root}/one/a") == b"a"
    assert not st.exists(f"{st.root}/staging/a")
    st.move(f"{st.root}/staging", f"{st.root}/two")  # no rename on S3: file by file
    assert st.list_files(f"{st.root}/two") == ["sub/b"]
    assert not st.exists(f"{st.root}/staging")


def test_delete_dir_removes_everything_and_ignores_missing(st, s3_server, s3_storage_path,
                                                          tmp_path):
    src = tmp_path / "ck"
    (src / "sub").mkdir(parents=True)
    (src / "w.bin").write_bytes(b"w")
    (src / "sub" / "x").write_bytes(b"x")
    for name in ("checkpoint_000000", "checkpoint_000001"):
        st.upload_dir(str(src), f"{st.root}/{name}")
        st.write_json_atomic(f"{st.root}/{name}/{constants.COMMIT_MARKER}", {"index": 0})
    st.delete_dir(f"{st.root}/checkpoint_000000")
    st.delete_dir(f"{st.root}/never_there")
    assert st.list_dir(st.root) == ["checkpoint_000001"]
    prefix = _key(s3_storage_path)
    left = {k[len(prefix) + 1:].split("/", 1)[0] for k in s3_server.keys(prefix)}
    assert left - {""} == {"checkpoint_000001"}  # "" is the run dir's own marker


def test_check_writable_ok_and_missing_bucket_is_clear(st, s3_server):
    st.check_writable()
    missing = Storage.from_path(s3_server.uri("runs", bucket="no-such-bucket-here"))
    with pytest.raises(StorageError, match="bucket 'no-such-bucket-here' does not exist") as ei:
        missing.check_writable()
    assert FAKE_AWS_SECRET not in str(ei.value)
    assert "s3://no-such-bucket-here/runs" in str(ei.value) and "?" not in str(ei.value)


def test_unreachable_endpoint_is_clear_error():
    port = _free_port()  # nothing listens there
    fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http",
                           connect_timeout=1, request_timeout=1,
                           retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
    st = Storage.from_path("s3://b/x", fs)
    with pytest.raises(StorageError, match="Cannot reach the bucket") as ei:
        st.check_writable()
    assert "?" not in str(ei.value) and FAKE_AWS_SECRET not in str(ei.value)


def test_bad_uri_parameter_is_named_without_secrets():
    with pytest.raises(StorageError, match="unexpected_option") as ei:
        resolve(f"s3://k:{FAKE_AWS_SECRET}@b/x?unexpected_option=1")
    assert FAKE_AWS_SECRET not in str(ei.value)


def test_scrub_masks_secrets_and_uri_parameters(aws_test_credentials):
    text = (f"failed: s3://KEY:{FAKE_AWS_SECRET}@b/p?endpoint_override=h:1 and "
            f"env secret {FAKE_AWS_SECRET}")
    out = scrub(text)
    assert FAKE_AWS_SECRET not in out and "endpoint_override" not in out
    assert "s3://b/p" in out
    assert redact("s3://KEY:SEC@b/p?x=1") == "s3://b/p"


def test_credentials_in_uri_work_and_never_show(s3_server, tmp_path):
    secret = "uriSecret-" + os.urandom(6).hex()
    bucket = "trainyard-test-uri-creds"  # its own bucket: bare URIs of it reuse this fs
    s3_server.client().create_bucket(Bucket=bucket)
    uri = s3_server.uri("creds", bucket=bucket).replace("s3://", f"s3://uri-key-id:{secret}@")
    st = Storage.from_path(uri)
    st.write_json_atomic(f"{st.root}/x.json", {"ok": True})
    assert st.read_json(f"{st.root}/x.json") == {"ok": True}
    assert secret not in st.display() and secret not in repr(st)
    assert secret not in scrub(f"error talking to {uri}: token {secret}")
    ckpt = Checkpoint(f"{uri.split('?')[0]}/x.json".rsplit("/", 1)[0], st.fs)
    assert secret not in ckpt.uri and secret not in repr(ckpt)


def test_checkpoint_on_s3_reads_and_reopens_from_uri(s3_server, s3_storage_path, tmp_path):
    st = Storage.from_path(s3_storage_path)
    local = Checkpoint.from_dict({"epoch": 7})
    st.upload_dir(local.path, f"{st.root}/ckpt")
    base, query = s3_storage_path.split("?")
    ckpt = Checkpoint.from_directory(f"{base}/ckpt?{query}")
    assert ckpt.uri == f"{base}/ckpt" and not ckpt.is_local
    assert ckpt.get_internal_representation() == ("uri", f"{base}/ckpt")
    assert ckpt.to_dict() == {"epoch": 7}
    with ckpt.as_directory() as d:
        assert os.listdir(d) == [constants.DICT_CHECKPOINT_FILE]
    assert not os.path.exists(d)
    out = ckpt.to_directory(str(tmp_path / "out"))
    assert os.listdir(out) == [constants.DICT_CHECKPOINT_FILE]
    assert pickle.loads(pickle.dumps(ckpt)).to_dict() == {"epoch": 7}
    # The bare URI reopens the same server in this process.
    again = Checkpoint(ckpt.uri)
    assert again == ckpt and again.to_dict() == {"epoch": 7}


def test_checkpoint_from_a_fresh_process(s3_server, s3_storage_path, tmp_path):
    st = Storage.from_path(s3_storage_path)
    st.upload_dir(Checkpoint.from_dict({"epoch": 3}).path, f"{st.root}/ckpt")
    base, query = s3_storage_path.split("?")
    ckpt = Checkpoint(f"{base}/ckpt?{query}")
    pickled = tmp_path / "ckpt.pkl"
    pickled.write_bytes(pickle.dumps(ckpt))
    unpickle_then_bare = (
        "import pickle, sys, os\n"
        "from engine import Checkpoint\n"
        "c = pickle.load(open(sys.argv[1], 'rb'))\n"
        "assert c.to_dict() == {'epoch': 3}\n"
        "with c.as_directory() as d: assert os.listdir(d) == ['dict_checkpoint.pkl']\n"
        "assert os.listdir(c.to_directory()) == ['dict_checkpoint.pkl']\n"
        "assert Checkpoint(c.uri).to_dict() == {'epoch': 3}\n"  # its bucket is known now
        "print('OK', c.uri)\n"
    )
    bare_only = (  # a fresh process given only the URI finds the server through the env
        "import sys\n"
        "from engine import Checkpoint\n"
        "c = Checkpoint(sys.argv[2])\n"
        "assert c.to_dict() == {'epoch': 3}\n"
        "print('OK', c.uri)\n"
    )
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    for script, extra in ((unpickle_then_bare, {}),
                          (bare_only, {"AWS_ENDPOINT_URL_S3": s3_server.endpoint_url})):
        env = dict(base_env, PYTHONPATH=REPO, **extra)
        proc = subprocess.run([sys.executable, "-c", script, str(pickled), ckpt.uri],
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.strip() == f"OK {base}/ckpt"
    assert "?" not in ckpt.uri


def test_commit_dir_moves_files_then_writes_the_marker(st, s3_server, s3_storage_path,
                                                       tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "model.pt").write_bytes(b"w")
    (src / "sub" / "opt.pt").write_bytes(b"o")
    staging, dest = f"{st.root}/.staging/a", f"{st.root}/checkpoint_000000"
    st.upload_dir(str(src), staging)
    assert st.commit_dir(staging, dest, {"index": 0}) == {"index": 0}
    assert st.read_commit_marker(dest) == {"index": 0}
    prefix = _key(s3_storage_path)
    # Files only ("/"-ended keys are the empty parent markers pyarrow's delete_dir leaves).
    assert [k for k in s3_server.keys(prefix) if not k.endswith("/")] == [
        f"{prefix}/checkpoint_000000/{f}"
        for f in (constants.COMMIT_MARKER, "model.pt", "sub/opt.pt")]
    # A committed copy is kept; replace=True replaces it whole.
    st.upload_dir(str(src), staging)
    assert st.commit_dir(staging, dest, {"index": 1}) == {"index": 0}
    assert not st.exists(staging)
    (src / "sub" / "opt.pt").unlink()
    st.upload_dir(str(src), staging)
    assert st.commit_dir(staging, dest, {"index": 2}, replace=True) == {"index": 2}
    assert st.list_files(dest) == [constants.COMMIT_MARKER, "model.pt"]


_MOVE_ONE_FILE_AND_DIE = """
import os, signal, sys
from engine.storage import Storage

st = Storage.from_path(sys.argv[1])
moved = []
real = Storage._move_file

def move_then_die(self, src, dst):
    if moved:
        os.kill(os.getpid(), signal.SIGKILL)
    real(self, src, dst)
    moved.append(dst)

Storage._move_file = move_then_die
st.commit_dir(st.root + "/.staging/a", st.root + "/data-ab12", {"index": 3})
"""


def test_a_commit_killed_midway_on_s3_is_not_committed(st, s3_storage_path, tmp_path):
    """SIGKILL the committing process after it moved one of two files: the destination
    holds a file but no marker, so it does not read as committed; a new commit over it
    goes through."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "part-0").write_bytes(b"0")
    (src / "part-1").write_bytes(b"1")
    staging, dest = f"{st.root}/.staging/a", f"{st.root}/data-ab12"
    st.upload_dir(str(src), staging)
    proc = subprocess.run([sys.executable, "-c", _MOVE_ONE_FILE_AND_DIE, s3_storage_path],
                          env=dict(os.environ, PYTHONPATH=REPO), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert len(st.list_files(dest)) == 1  # cut short between the two moves
    assert st.read_commit_marker(dest) is None
    st.upload_dir(str(src), staging)
    assert st.commit_dir(staging, dest, {"index": 3}) == {"index": 3}
    assert st.list_files(dest) == [constants.COMMIT_MARKER, "part-0", "part-1"]


def test_a_marker_staged_along_is_not_moved_before_the_files(st, tmp_path, monkeypatch):
    """A staged copy of a committed directory carries the old marker: moved first, it
    would commit the destination before its files; the commit writes the new one last."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.pt").write_bytes(b"w")
    (src / constants.COMMIT_MARKER).write_text('{"index": 0}')
    staging, dest = f"{st.root}/.staging/a", f"{st.root}/checkpoint_000001"
    st.upload_dir(str(src), staging)
    seen = []
    real = Storage._move_file

    def watch(self, a, b):
        seen.append((b.rsplit("/", 1)[-1], self.read_commit_marker(dest)))
        real(self, a, b)

    monkeypatch.setattr(Storage, "_move_file", watch)
    st.commit_dir(staging, dest, {"index": 1})
    assert seen == [("model.pt", None)]
    assert st.read_commit_marker(dest) == {"index": 1}
