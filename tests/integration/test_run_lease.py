"""One owner per run, with real drivers: two ``fit()`` processes on one run name at once
(local path, then S3 on a moto server): one trains, the other raises
``RunInProgressError`` and changes nothing; the owner is SIGKILLed; a caller on another
host before the lease expires is refused, one after it takes the run over and resumes
from the latest committed checkpoint (``restores`` 1). Fenced ownership: the owner is
stalled (SIGSTOP) past its lease while a second driver takes the run over and finishes
it; let go, the first writes nothing more and fails with ``RunOwnershipLostError``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from engine._internal.storage.filesystem import Storage
from tests.conftest import REPO

# Long enough that a caller started right after the owner's SIGKILL reaches its lease
# check (a fresh Python importing the engine: seconds on a loaded 2-core machine) first.
LEASE_S = 15.0
DRIVER = textwrap.dedent("""
    import json, os, socket, sys, time
    if os.environ.get("AS_HOST"):  # a driver on another machine (by its host name)
        socket.gethostname = lambda: os.environ["AS_HOST"]
    import engine
    from engine import Checkpoint, RunConfig, ScalingConfig
    from engine.exceptions import RunInProgressError, RunOwnershipLostError
    from engine.trainer import DataParallelTrainer

    storage, name = sys.argv[1:3]
    # How long this driver's run is and how fast it goes: not the run's config (the same
    # for every driver of the run, as a run is its config), but shipped with train_func.
    ROUNDS, SLEEP = int(sys.argv[3]), float(sys.argv[4])

    def train_func(config):
        start = 0
        ckpt = engine.get_checkpoint()
        if ckpt is not None:
            start = ckpt.to_dict()["i"] + 1
        for i in range(start, ROUNDS):
            time.sleep(SLEEP)
            engine.report({"i": i, "start": start}, checkpoint=Checkpoint.from_dict({"i": i}))

    trainer = DataParallelTrainer(
        train_func, train_loop_config={"lr": 0.1},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name=name, storage_path=storage, verbose=0))
    try:
        result = trainer.fit()
    except RunOwnershipLostError as exc:
        print("LOST " + json.dumps({"owner": exc.owner, "at": time.time(),
                                    "message": str(exc)}), flush=True)
        sys.exit(4)
    except RunInProgressError as exc:
        print("IN_PROGRESS " + json.dumps({"owner": exc.owner, "expires_at": exc.expires_at,
                                           "message": str(exc)}), flush=True)
        sys.exit(3)
    print("RESULT " + json.dumps({"i": result.metrics["i"],
                                  "start": result.metrics["start"]}), flush=True)
""")


def _start(script: str, storage: str, name: str, n: int, sleep: float,
           host: str = "", lease_s: float = LEASE_S, ray_address: str = ""
           ) -> subprocess.Popen:
    """A driver process; its own local Ray unless ``ray_address`` (a cluster to join)."""
    env = dict(os.environ, PYTHONPATH=REPO, TRAINYARD_RUN_LEASE_S=str(lease_s),
               TRAINYARD_RAY_NUM_CPUS="2", RAY_DEDUP_LOGS="0", AS_HOST=host)
    env.pop("RAY_ADDRESS", None)
    if ray_address:
        env["RAY_ADDRESS"] = ray_address
    return subprocess.Popen([sys.executable, script, storage, name, str(n), str(sleep)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def _line(output: str, tag: str) -> dict:
    for line in output.splitlines():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1:])
    raise AssertionError(f"no {tag} line in the driver's output:\n{output[-4000:]}")


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the driver and every process it started (its local Ray), as a lost
    machine would."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for p in [psutil.Process(proc.pid)] + family:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=30)
    psutil.wait_procs(family, timeout=30)


def _record(st: Storage) -> dict:
    raw = st.read_bytes(f"{st.root}/run_state.json")
    return json.loads(raw)  # never a torn or corrupted JSON


def _committed(st: Storage) -> list:
    return [n for n in st.list_dir(st.root) if n.startswith("checkpoint_")
            and st.exists(f"{st.root}/{n}/.trainyard_committed")]


def _storage_of(storage: str, name: str) -> Storage:
    base = Storage.from_path(storage)
    return Storage(base.fs, f"{base.root}/{name}")


def _scenario(tmp_path, storage: str) -> None:
    script = str(tmp_path / "driver.py")
    with open(script, "w") as f:
        f.write(DRIVER)
    name = "lease-run"
    st = _storage_of(storage, name)
    a = _start(script, storage, name, 200, 0.3)
    b = _start(script, storage, name, 200, 0.3)
    procs = {"a": a, "b": b}
    try:
        # Whoever lost the race exits at once, before any Ray starts.
        deadline = time.monotonic() + 120
        while all(p.poll() is None for p in procs.values()):
            assert time.monotonic() < deadline, "neither driver was refused"
            time.sleep(0.2)
        loser_key = next(k for k, p in procs.items() if p.poll() is not None)
        owner = procs["b" if loser_key == "a" else "a"]
        refused = procs[loser_key]
        out = refused.communicate(timeout=30)[0]
        assert refused.returncode == 3, out
        info = _line(out, "IN_PROGRESS")
        assert info["owner"]["pid"] == owner.pid, info
        assert f"pid {owner.pid}" in info["message"] and "expires at" in info["message"]
        # The owner trains and commits checkpoints; the record stays valid throughout.
        # (Over 180 s once, at load average 20 on the 2-core VM: it starts its own Ray.)
        deadline = time.monotonic() + 300
        while len(_committed(st)) < 1 or _record(st).get("history", []) == []:
            assert owner.poll() is None, owner.communicate()[0][-4000:]
            assert time.monotonic() < deadline, "the owner committed no checkpoint"
            time.sleep(0.5)
        assert _record(st)["owner"]["pid"] == owner.pid
        _kill_tree(owner)
        before = _record(st)
        assert before["state"] == "RUNNING" and before.get("restores", 0) == 0
        # Right after the kill the lease is still live for a driver on another host
        # (it cannot see that the owner's process is gone): refused, nothing changed.
        # (On the owner's own host it would take over at once: test_fault_tolerance.)
        early = _start(script, storage, name, 200, 0.3, host="other-host")
        out = early.communicate(timeout=120)[0]
        assert early.returncode == 3, out
        assert _line(out, "IN_PROGRESS")["owner"]["pid"] == owner.pid
        assert _record(st) == before
        time.sleep(LEASE_S + 0.5)
        # After expiry the next caller takes over and resumes from the checkpoint.
        last = max(_committed(st))
        heir = _start(script, storage, name, int(json.loads(
            st.read_bytes(f"{st.root}/{last}/.trainyard_committed"))["iteration"]) + 3, 0.05,
            host="other-host")
        out = heir.communicate(timeout=300)[0]
        assert heir.returncode == 0, out[-4000:]
        result = _line(out, "RESULT")
        assert result["start"] >= 1, result  # resumed, not restarted from scratch
        after = _record(st)
        assert after["state"] == "FINISHED" and after["restores"] == 1, after
        assert after["owner"]["pid"] == heir.pid
    finally:
        for p in procs.values():
            if p.poll() is None:
                _kill_tree(p)


def test_two_drivers_one_owner_then_takeover_local(tmp_path):
    _scenario(tmp_path, str(tmp_path / "storage"))


def test_two_drivers_one_owner_then_takeover_s3(tmp_path, s3_storage_path):
    _scenario(tmp_path, s3_storage_path)


# Short, so that the stall and the take-over take seconds; the owner renews every 1 s.
STALL_LEASE_S = 3.0


def _markers(st: Storage) -> list:
    out = []
    for name in _committed(st):
        marker = json.loads(st.read_bytes(f"{st.root}/{name}/.trainyard_committed"))
        out.append(dict(marker, dir_name=name))
    return sorted(out, key=lambda m: m["committed_at"])


def _files(st: Storage) -> dict:
    """The run directory's files (but the staging area) with their content."""
    return {rel: st.read_bytes(f"{st.root}/{rel}") for rel in st.list_files(st.root)
            if not rel.startswith(".staging")}


def _stalled_owner(tmp_path, storage: str, ray_address: str) -> dict:
    script = str(tmp_path / "driver.py")
    with open(script, "w") as f:
        f.write(DRIVER)
    name, rounds = "stalled-run", 40
    st = _storage_of(storage, name)
    # Both drivers join the session's Ray (a driver's stall is the point, not its Ray).
    first = _start(script, storage, name, rounds, 0.25, lease_s=STALL_LEASE_S,
                   ray_address=ray_address)
    second = None
    try:
        deadline = time.monotonic() + 180
        while len(_committed(st)) < 2:
            assert first.poll() is None, first.communicate()[0][-4000:]
            assert time.monotonic() < deadline, "the first driver committed nothing"
            time.sleep(0.1)
        first.send_signal(signal.SIGSTOP)  # frozen mid-run: no renewal, no writes
        stopped_at = time.monotonic()
        time.sleep(STALL_LEASE_S + 1.0)  # its lease expires meanwhile
        second = _start(script, storage, name, rounds, 0.02, lease_s=STALL_LEASE_S,
                        ray_address=ray_address)
        out2 = second.communicate(timeout=300)[0]
        assert second.returncode == 0, out2[-4000:]
        assert _line(out2, "RESULT")["start"] >= 2  # resumed from the first's checkpoint
        finished = _files(st)
        first.send_signal(signal.SIGCONT)
        resumed_at, stall_s = time.time(), time.monotonic() - stopped_at
        out1 = first.communicate(timeout=120)[0]
        # The first driver learns it lost the run, and who has it, and stops.
        assert first.returncode == 4, out1[-4000:]
        lost = _line(out1, "LOST")
        assert lost["owner"]["pid"] == second.pid, lost
        assert f"pid {second.pid}" in lost["message"]
        assert "TRAINYARD_RUN_LEASE_S" in lost["message"]
        # It wrote nothing after it went on: no checkpoint, no record, no log row.
        assert _files(st) == finished
        # No checkpoint of the first committed after the second's first, every round
        # exactly once, and the record is the second driver's finished run.
        markers = _markers(st)
        by = [m["written_by"]["pid"] for m in markers]
        assert set(by) == {first.pid, second.pid}, by
        assert by == sorted(by, key=lambda pid: pid != first.pid), by
        record = _record(st)
        assert record["state"] == "FINISHED" and record["owner"]["pid"] == second.pid
        assert [row["i"] for row in record["history"]] == list(range(rounds))
        assert [row["training_iteration"] for row in record["history"]] \
            == list(range(1, rounds + 1))
        return {"detect_s": lost["at"] - resumed_at, "stall_s": stall_s}
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
                _kill_tree(p)


def test_a_stalled_owner_loses_the_run_and_writes_nothing_more_local(tmp_path,
                                                                     ray_session):
    took = _stalled_owner(tmp_path, str(tmp_path / "storage"),
                          ray_session.get_runtime_context().gcs_address)
    print(f"lost lease detected {took['detect_s']:.2f} s after the stall "
          f"({took['stall_s']:.1f} s) ended")


def test_a_stalled_owner_loses_the_run_and_writes_nothing_more_s3(tmp_path, ray_session,
                                                                  s3_storage_path):
    took = _stalled_owner(tmp_path, s3_storage_path,
                          ray_session.get_runtime_context().gcs_address)
    print(f"lost lease detected {took['detect_s']:.2f} s after the stall "
          f"({took['stall_s']:.1f} s) ended")
