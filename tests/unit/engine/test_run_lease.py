"""The run lease on a local directory and on S3 (moto server): atomic take, refusal of a
live lease without writes, expiry and take-over, release, loss detection."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import signal
import socket
import subprocess
import sys
import time

import pytest

from engine._internal.run_state import lease as run_lease
from engine._internal.run_state.lease import (LEASE_DIR, LEASE_S_ENV_VAR, RunLease, lease_seconds,
                                        read_lease)
from engine._internal.storage.filesystem import Storage
from engine.exceptions import RunInProgressError, RunOwnershipLostError, SettingError


@pytest.fixture(params=["local", "s3"])
def run_uri(request, tmp_path, aws_test_credentials):
    if request.param == "local":
        return str(tmp_path / "runs" / "r1")
    return request.getfixturevalue("s3_storage_path").replace("?", "/r1?", 1)


@pytest.fixture
def run_storage(run_uri):
    return Storage.from_path(run_uri)


def _snapshot(st: Storage) -> dict:
    """Every file under the run directory with a hash of its content."""
    return {rel: hashlib.sha256(st.read_bytes(f"{st.root}/{rel}")).hexdigest()
            for rel in st.list_files(st.root)}


def test_a_live_lease_refuses_a_second_driver_and_changes_nothing(run_storage):
    first = RunLease(run_storage, "r1", ttl_s=30).acquire()
    try:
        before = _snapshot(run_storage)
        with pytest.raises(RunInProgressError) as info:
            RunLease(run_storage, "r1", ttl_s=30).acquire()
        assert _snapshot(run_storage) == before
        err = info.value
        assert err.owner["pid"] == os.getpid() and err.owner["host"] == socket.gethostname()
        assert err.owner["id"] == first.owner["id"]
        assert err.expires_at > time.time() + 20
        assert f"pid {os.getpid()}" in str(err) and "TRAINYARD_RUN_LEASE_S" in str(err)
        # It crosses processes (Ray, orchestrator results) with its fields.
        again = pickle.loads(pickle.dumps(err))
        assert again.owner == err.owner and again.expires_at == err.expires_at
    finally:
        first.release()


def test_release_lets_the_next_driver_in_at_once(run_storage):
    RunLease(run_storage, "r1", ttl_s=30).acquire().release()
    second = RunLease(run_storage, "r1", ttl_s=30).acquire()
    assert second.previous is None  # released, not taken over
    second.release()
    assert read_lease(run_storage)["released_at"] is not None


def test_heartbeat_keeps_a_short_lease_alive(run_storage):
    owner = RunLease(run_storage, "r1", ttl_s=0.6).acquire()
    try:
        time.sleep(1.5)  # well past one lease length: renewed meanwhile
        with pytest.raises(RunInProgressError):
            RunLease(run_storage, "r1", ttl_s=0.6).acquire()
    finally:
        owner.release()


def test_an_expired_lease_is_taken_over_and_its_owner_learns_it(run_storage):
    dead = RunLease(run_storage, "r1", ttl_s=0.5).acquire()
    dead._stop.set()  # the owner stops renewing, as a frozen or killed driver does
    dead._thread.join()
    time.sleep(0.8)
    heir = RunLease(run_storage, "r1", ttl_s=30).acquire()
    try:
        assert heir.previous["owner"]["id"] == dead.owner["id"]
        assert dead.renew() is False and dead.lost
        dead.release()  # must not release the heir's lease
        with pytest.raises(RunInProgressError) as info:
            RunLease(run_storage, "r1", ttl_s=30).acquire()
        assert info.value.owner["id"] == heir.owner["id"]
    finally:
        heir.release()


def test_a_fenced_write_of_a_driver_that_lost_the_run_is_refused(run_uri, run_storage):
    """The run directory's writes go through the lease's fence: while the lease is
    fresh no storage access is needed, once stale it is confirmed first, and a driver
    whose lease was taken over cannot write (nor retry) anything more to the run."""
    run = Storage.from_path(run_uri)
    dead = RunLease(run, "r1", ttl_s=0.5).acquire()
    run.fence_with(dead.check)
    run.write_json_atomic(f"{run.root}/a.json", {"v": 1})  # fresh: written
    dead._stop.set()  # frozen: no renewal, as under SIGSTOP
    dead._thread.join()
    time.sleep(0.3)  # stale (over half the lease) but not expired: confirmed, written
    run.write_json_atomic(f"{run.root}/b.json", {"v": 1})
    assert not dead.lost
    dead._confirmed_at -= 1.0  # as if frozen for a second: expired meanwhile
    time.sleep(max(0.0, read_lease(run_storage)["expires_at"] - time.time()) + 0.1)
    heir = RunLease(run_storage, "r1", ttl_s=30).acquire()
    try:
        before = _snapshot(run_storage)
        for write in (lambda: run.write_json_atomic(f"{run.root}/a.json", {"v": 2}),
                      lambda: run.delete_dir(f"{run.root}/c"),
                      lambda: run.move(f"{run.root}/a.json", f"{run.root}/d.json")):
            with pytest.raises(RunOwnershipLostError) as info:
                write()
            assert info.value.owner["id"] == heir.owner["id"]
        assert dead.lost and _snapshot(run_storage) == before
        message = str(info.value)
        assert f"pid {os.getpid()}" in message and "TRAINYARD_RUN_LEASE_S" in message
        again = pickle.loads(pickle.dumps(info.value))
        assert again.owner == info.value.owner and again.run_name == "r1"
        # A copy shipped to a worker carries no fence (workers write staging only).
        shipped = pickle.loads(pickle.dumps(run))
        shipped.write_json_atomic(f"{run.root}/staged.json", {"v": 1})
        run.fence_with(None)
        run.write_json_atomic(f"{run.root}/unfenced.json", {"v": 1})
    finally:
        heir.release()


def _contend(storage: Storage, barrier, results) -> None:
    barrier.wait()
    lease = None
    try:
        lease = RunLease(storage, "r1", ttl_s=30).acquire()
        results.put(("won", lease.owner["id"]))
    except RunInProgressError as exc:
        results.put(("lost", exc.owner.get("id")))
    # The winner holds the run until every driver has tried: a fixed hold let a driver
    # that a loaded machine started late find the lease released, and take the run
    # (rightly) as a second winner.
    barrier.wait(timeout=60)
    if lease is not None:
        lease.release()


def _race(run_storage: Storage, stale: bool, n: int = 6) -> None:
    if stale:  # all of them find the same expired lease
        dead = RunLease(run_storage, "r1", ttl_s=0.2).acquire()
        dead._stop.set()
        dead._thread.join()
        time.sleep(0.4)
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_contend, args=(run_storage, barrier, results))
             for _ in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in range(n)]
    for p in procs:
        p.join(timeout=30)
    winners = [who for what, who in outcomes if what == "won"]
    assert len(winners) == 1, outcomes
    assert all(who == winners[0] for what, who in outcomes if what == "lost"), outcomes


@pytest.mark.parametrize("stale", [False, True], ids=["fresh", "expired"])
def test_exactly_one_of_many_simultaneous_drivers_wins(run_storage, stale):
    _race(run_storage, stale)


@pytest.fixture(scope="module")
def slow_check_s3(aws_test_credentials, tmp_path_factory):
    """A second test S3 server whose precondition checks take 0.3 s: without the atomic
    conditional PUTs of tests/support/moto_server.py, every racing driver would pass the check."""
    pytest.importorskip("moto.server", reason="moto[server] is needed for the S3 tests")
    from tests.conftest import start_s3_server, stop_s3_server
    from tests.support.moto_server import CHECK_DELAY_ENV_VAR

    server = start_s3_server(tmp_path_factory.mktemp("moto_slow"),
                             env=dict(os.environ, **{CHECK_DELAY_ENV_VAR: "0.3"}))
    yield server
    stop_s3_server(server)


@pytest.mark.parametrize("stale", [False, True], ids=["fresh", "expired"])
def test_drivers_racing_through_a_slow_s3_check_still_have_one_winner(slow_check_s3,
                                                                     stale):
    # S3 decides concurrent conditional writes to one key atomically; the test server
    # must too, or the lease tests above pass or fail by luck (moto's own server let two
    # of six drivers create the lease in CI).
    uri = slow_check_s3.uri(f"runs/slow-{'expired' if stale else 'fresh'}/r1")
    _race(Storage.from_path(uri), stale)


def test_file_leases_keep_few_generations(tmp_path):
    st = Storage.from_path(str(tmp_path / "r"))
    for _ in range(5):
        lease = RunLease(st, "r", ttl_s=0.2).acquire()
        lease._stop.set()
        lease._thread.join()
        time.sleep(0.3)
    assert len(os.listdir(tmp_path / "r" / LEASE_DIR)) == 2


def test_lease_length_from_the_environment(monkeypatch):
    monkeypatch.setenv(LEASE_S_ENV_VAR, "7.5")
    assert lease_seconds() == 7.5
    monkeypatch.setenv(LEASE_S_ENV_VAR, "soon")
    with pytest.raises(SettingError, match=f"{LEASE_S_ENV_VAR}='soon' .* number > 0"):
        lease_seconds()


# --- a dead owner on this host: taken over at once, before the lease expires -----------
_HOLD_LEASE = """
import sys, time
from engine._internal.run_state.lease import RunLease
from engine._internal.storage.filesystem import Storage
RunLease(Storage.from_path(sys.argv[1]), "r1", ttl_s=600).acquire()
print("taken", flush=True)
time.sleep(600)
"""


def _driver_holding_the_lease(uri: str) -> subprocess.Popen:
    """A separate process (a driver) that takes a 10-minute lease and keeps it."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_LEASE, uri],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    assert proc.stdout.readline().strip() == "taken"
    return proc


def test_a_sigkilled_driver_on_this_host_is_taken_over_at_once(run_uri, run_storage):
    proc = _driver_holding_the_lease(run_uri)
    try:
        with pytest.raises(RunInProgressError):  # alive: refused
            RunLease(run_storage, "r1", ttl_s=30).acquire()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert read_lease(run_storage)["expires_at"] > time.time() + 500  # not expired
    heir = RunLease(run_storage, "r1", ttl_s=30).acquire()
    try:
        assert heir.previous["owner"]["pid"] == proc.pid
        assert read_lease(run_storage)["owner"]["id"] == heir.owner["id"]
    finally:
        heir.release()


def test_a_reused_pid_does_not_keep_a_dead_drivers_lease(run_storage, monkeypatch):
    # The owner's pid is alive (this process) but started at another time than the
    # lease records: the pid was reused by another process after the driver died.
    monkeypatch.setattr(run_lease, "_process_started_at", lambda pid=None: 1.0e9)
    dead = RunLease(run_storage, "r1", ttl_s=600).acquire()
    dead._stop.set()
    dead._thread.join()
    monkeypatch.undo()
    heir = RunLease(run_storage, "r1", ttl_s=30).acquire()
    try:
        assert heir.previous["owner"]["id"] == dead.owner["id"]
        assert dead.renew() is False and dead.lost
    finally:
        heir.release()


def test_a_dead_pid_on_another_host_waits_for_the_expiry(run_uri, run_storage,
                                                         monkeypatch):
    real = run_lease._host_identity
    monkeypatch.setattr(run_lease, "_host_identity",
                        lambda: dict(real(), host="other-host"))
    proc = _driver_holding_the_lease(run_uri)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    # The lease names this host, but the caller now runs on "other-host": it cannot
    # tell whether that pid is dead, so the live lease stands.
    with pytest.raises(RunInProgressError):
        RunLease(run_storage, "r1", ttl_s=30).acquire()
