"""One owner per run: an expiring lease in the run directory, taken atomically.

A driver takes the lease before it reads or writes the run record and renews it from a
daemon thread while the run runs; a second driver that finds a live lease raises
:class:`~engine.exceptions.RunInProgressError` without writing anything. A lease that
is not renewed for ``$TRAINYARD_RUN_LEASE_S`` seconds (default 60) expires: its owner is
presumed dead (SIGKILL, a lost node, a killed orchestrator worker) and the next driver
takes the run over and resumes it from its latest committed checkpoint. An owner on the
same host whose process is gone (or whose pid now names a process started at another
time) is known dead: its lease is taken over at once, without waiting for the expiry.

Taking a lease must be atomic, so that two drivers that both find no lease (or the same
expired one) cannot both win:

* local and shared file systems (and ``memory://``): numbered lease files
  ``<run>/.lease/<generation>.json``. Whoever takes generation ``g + 1`` over an
  expired ``g`` creates that file with ``link(2)`` of a fully written temporary file,
  which fails when it exists; only one competitor can create it. The owner renews its
  own file by an atomic rename over it.
* S3 and S3-compatible servers: one object ``<run>/.run_lease.json`` written with
  boto3's conditional PUT (pyarrow has none): ``If-None-Match: *`` to create it,
  ``If-Match: <ETag read>`` to take an expired lease over or to renew one's own, so a
  write based on a stale read fails with 412 instead of overwriting a newer owner.
* other object stores (GCS, HDFS): a plain read-then-write, with a warning that it is
  not atomic.

Every write of the owner to the run directory is fenced by the lease
(:meth:`RunLease.check`, installed with ``Storage.fence_with``): it goes ahead only
while the lease was confirmed less than half its length ago (no other driver can take
an unexpired lease), and otherwise first confirms it with the backend's conditional
renewal (a newer generation file, or an ``If-Match`` PUT that fails with 412). A driver
that lost its lease (stopped, or cut off from the storage, for longer than the lease
while another driver took the run over) so writes no checkpoint and no record after the
new owner's first: it raises :class:`~engine.exceptions.RunOwnershipLostError`, naming
the new owner, at its next write or within one renewal period, whichever comes first.
The storage retries of a write check the fence before every attempt, so an outage
longer than the lease cannot carry an old write over a take-over either.

Expiry compares wall clocks of the hosts involved: keep them in sync (NTP), and keep
``TRAINYARD_RUN_LEASE_S`` well above any clock skew and storage stall.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any, Dict, Optional, Tuple

from engine import constants
from engine._internal.storage.filesystem import Storage, join
from engine._internal.storage.s3 import client_error, client_for
from engine.exceptions import RunInProgressError, RunOwnershipLostError

logger = logging.getLogger("engine")

LEASE_S_ENV_VAR = constants.RUN_LEASE_S_ENV_VAR
DEFAULT_LEASE_S = constants.SETTINGS[LEASE_S_ENV_VAR].default
# Who started this driver, shown in RunInProgressError (set by the ray_job mode; the
# Airflow and Prefect variables below are used when it is not set).
ORCHESTRATOR_RUN_ID_ENV_VAR = constants.ORCHESTRATOR_RUN_ID_ENV_VAR
_AIRFLOW_CTX_VARS = ("AIRFLOW_CTX_DAG_ID", "AIRFLOW_CTX_DAG_RUN_ID", "AIRFLOW_CTX_TASK_ID")
_PREFECT_FLOW_RUN_VAR = "PREFECT__FLOW_RUN_ID"
LEASE_DIR = ".lease"          # file systems: one file per generation
LEASE_OBJECT = ".run_lease.json"  # S3: one object, written conditionally
_TAKE_ATTEMPTS = 3
# A write goes ahead without asking the storage while the lease was confirmed less than
# this share of its length ago; past it, the lease is renewed (conditionally) first.
_FRESH_SHARE = 0.5
# A renewal that failed for a storage error (not a take-over) still lets a write go
# ahead while the lease was confirmed less than this share of its length ago.
_UNSURE_SHARE = 0.9

Doc = Dict[str, Any]


def _clock() -> float:
    """Seconds on a clock that runs on while the process is stopped (SIGSTOP) or the
    machine suspended, as the wall clocks that judge a lease's expiry do."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


def lease_seconds() -> float:
    """``$TRAINYARD_RUN_LEASE_S`` (default 60 s).

    Raises:
        SettingError: the variable is not a number of seconds > 0.
    """
    return constants.get(LEASE_S_ENV_VAR)


def orchestrator_run_id() -> Optional[str]:
    """The orchestrator run this driver works for, when the environment says so."""
    explicit = constants.get(ORCHESTRATOR_RUN_ID_ENV_VAR)
    if explicit:
        return explicit
    airflow = [os.environ.get(k) for k in _AIRFLOW_CTX_VARS]
    if all(airflow):
        return "airflow:" + "/".join(airflow)  # type: ignore[arg-type]
    flow_run = os.environ.get(_PREFECT_FLOW_RUN_VAR)
    return f"prefect:{flow_run}" if flow_run else None


def _process_started_at(pid: Optional[int] = None) -> Optional[float]:
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # noqa: BLE001 - informative only
        return None


def _read_first_line(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().strip() or None
    except OSError:
        return None


def _host_identity() -> Dict[str, Any]:
    """What tells this machine and its pid namespace apart from another one with the
    same host name (containers with host networking share it): the kernel's boot id and
    the pid namespace's inode (Linux; None elsewhere)."""
    try:
        pid_ns: Optional[str] = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_ns = None
    return {"host": socket.gethostname(),
            "boot_id": _read_first_line("/proc/sys/kernel/random/boot_id"),
            "pid_ns": pid_ns}


# psutil's create_time of one process is the same value on every read (boot time + the
# start tick); a different one means the pid now names another process.
_START_TIME_TOLERANCE_S = 0.5


def dead_owner_reason(owner: Dict[str, Any]) -> Optional[str]:
    """Why a lease's owner is certainly dead, or None when it may be alive.

    Only an owner on this host (same host name, boot and pid namespace) can be judged:
    it is dead when its pid is gone or a zombie, or when the pid now belongs to a
    process started at another time (the pid was reused). Anything uncertain (another
    host, no psutil, no start time recorded, access denied) counts as alive, so the
    lease is then left to expire.
    """
    here = _host_identity()
    if owner.get("host") != here["host"]:
        return None
    # Leases written before these were recorded carry none: the host name decides then.
    if any(owner.get(k) is not None and owner[k] != here[k] for k in ("boot_id", "pid_ns")):
        return None
    try:
        import psutil

        pid = int(owner["pid"])
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return f"its process {pid} has exited"
        started = owner.get("process_started_at")
        if started is not None and abs(proc.create_time() - float(started)) \
                > _START_TIME_TOLERANCE_S:
            return f"its pid {pid} now belongs to another process"
        return None
    except (KeyError, TypeError, ValueError, ImportError):
        return None
    except Exception as exc:  # noqa: BLE001 - psutil's errors, imported lazily
        if type(exc).__name__ == "NoSuchProcess":
            return f"its process {owner.get('pid')} is gone"
        return None  # AccessDenied and the like: cannot tell


def describe_owner(owner: Dict[str, Any]) -> str:
    """``host pid 123 (orchestrator run X)`` for messages."""
    text = f"{owner.get('host', '?')} pid {owner.get('pid', '?')}"
    if owner.get("orchestrator_run_id"):
        text += f" (orchestrator run {owner['orchestrator_run_id']})"
    return text


def is_live(doc: Optional[Doc], now: Optional[float] = None) -> bool:
    """Whether a lease document still holds the run (not released, not expired)."""
    if not doc or doc.get("released_at"):
        return False
    return float(doc.get("expires_at", 0.0)) > (time.time() if now is None else now)


# --- where leases live ------------------------------------------------------------------
class _FileLeases:
    """Numbered lease files; creation by ``link(2)`` is exclusive on POSIX file systems,
    NFS included."""

    def __init__(self, run_dir: str) -> None:
        self.dir = os.path.join(run_dir, LEASE_DIR)

    def _path(self, generation: int) -> str:
        return os.path.join(self.dir, f"{generation:08d}.json")

    def _generations(self) -> list:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def read(self) -> Tuple[Optional[Doc], Any]:
        for generation in reversed(self._generations()):
            try:
                with open(self._path(generation), "rb") as f:
                    return json.loads(f.read().decode("utf-8")), generation
            except FileNotFoundError:  # cleaned up meanwhile: look again
                continue
        return None, None

    def _write_tmp(self, doc: Doc) -> str:
        os.makedirs(self.dir, exist_ok=True)
        tmp = os.path.join(self.dir, f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "wb") as f:
            f.write(json.dumps(doc, indent=1).encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def create(self, doc: Doc, after: Any) -> Any:
        generation = 0 if after is None else int(after) + 1
        tmp = self._write_tmp(doc)
        try:
            os.link(tmp, self._path(generation))  # fails if another driver made it first
        except FileExistsError:
            return None
        finally:
            os.unlink(tmp)
        for old in self._generations():
            if old < generation - 1:  # keep the one before, for who-ran-last
                _remove(self._path(old))
        return generation

    def renew(self, doc: Doc, token: Any) -> Any:
        if self._generations()[-1:] != [token]:
            return None  # a newer generation: someone took the run over
        os.replace(self._write_tmp(doc), self._path(token))
        return token


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class _S3Leases:
    """One object written with conditional PUTs (If-None-Match / If-Match)."""

    def __init__(self, fs: Any, run_dir: str) -> None:
        self.bucket, _, prefix = run_dir.partition("/")
        self.key = f"{prefix}/{LEASE_OBJECT}" if prefix else LEASE_OBJECT
        self.client = client_for(fs)

    def read(self) -> Tuple[Optional[Doc], Any]:
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except self.client.exceptions.NoSuchKey:
            return None, None
        return json.loads(obj["Body"].read().decode("utf-8")), obj["ETag"]

    def _put(self, doc: Doc, **condition: str) -> Any:
        from botocore.exceptions import ClientError

        try:
            out = self.client.put_object(Bucket=self.bucket, Key=self.key,
                                         Body=json.dumps(doc, indent=1).encode("utf-8"),
                                         ContentType="application/json", **condition)
        except ClientError as exc:
            code, status = client_error(exc)
            # 412: the object changed since it was read; 409: a concurrent conditional
            # write won; NoSuchKey: If-Match on an object deleted meanwhile.
            if status in (409, 412) or code in ("PreconditionFailed", "NoSuchKey",
                                                "ConditionalRequestConflict"):
                return None
            raise
        return out["ETag"]

    def create(self, doc: Doc, after: Any) -> Any:
        return self._put(doc, IfNoneMatch="*") if after is None \
            else self._put(doc, IfMatch=after)

    def renew(self, doc: Doc, token: Any) -> Any:
        return self._put(doc, IfMatch=token)


class _PlainLeases:
    """Read-then-write through pyarrow: not atomic (GCS, HDFS, S3 without boto3)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.path = join(storage.root, LEASE_OBJECT)

    def read(self) -> Tuple[Optional[Doc], Any]:
        doc = self.storage.read_json(self.path)
        return doc, (doc or {}).get("owner", {}).get("id")

    def create(self, doc: Doc, after: Any) -> Any:
        current, token = self.read()
        if current is not None and token != after:
            return None
        self.storage.write_json_atomic(self.path, doc)
        return doc["owner"]["id"]

    def renew(self, doc: Doc, token: Any) -> Any:
        _current, now = self.read()
        if now != token:
            return None
        self.storage.write_json_atomic(self.path, doc)
        return token


def _backend(storage: Storage) -> Any:
    if storage.local:
        return _FileLeases(storage.root)
    if storage.fs.type_name == "s3":
        try:
            return _S3Leases(storage.fs, storage.root)
        except (ImportError, NotImplementedError) as exc:
            logger.warning("The run lease of %s is not taken atomically: boto3 %s "
                           "(pip install 'trainyard[s3]').", storage.display(),
                           "is missing" if isinstance(exc, ImportError)
                           else f"is not used when {exc}")
    else:
        logger.warning("Storage %s has no conditional writes trainyard can use: two "
                       "drivers started at the same moment on run %s could both take it.",
                       storage.display(), storage.root.rsplit("/", 1)[-1])
    return _PlainLeases(storage)


# --- the lease a driver holds -----------------------------------------------------------
class RunLease:
    """The lease of one run directory, for one driver.

    Args:
        storage: The run directory's storage (``Storage(fs, <run dir>)``).
        name: The run name (for messages).
        ttl_s: Seconds a lease lives without renewal; default ``lease_seconds()``.
    """

    def __init__(self, storage: Storage, name: str, ttl_s: Optional[float] = None) -> None:
        # Its own Storage object: the run's is fenced by this lease (``check``), and a
        # lease backend writing through it would check itself.
        self.storage = Storage(storage.fs, storage.root)
        self.name = name
        self.ttl_s = lease_seconds() if ttl_s is None else float(ttl_s)
        self.owner: Dict[str, Any] = {}
        self.previous: Optional[Doc] = None  # the expired lease taken over, if any
        self.lost = False
        self._lost_error: Optional[RunOwnershipLostError] = None
        self._confirmed_at = 0.0  # _clock() when the lease was last taken or renewed
        self._backend: Any = None
        self._token: Any = None
        self._doc: Doc = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    @property
    def held(self) -> bool:
        return self._token is not None and not self.lost

    def acquire(self) -> "RunLease":
        """Take the run, or raise without writing anything.

        Raises:
            RunInProgressError: another driver's lease is live.
        """
        self._backend = _backend(self.storage)
        for _attempt in range(_TAKE_ATTEMPTS):
            doc, token = self._backend.read()
            now = time.time()
            # A live lease whose owner is a dead process on this host (a SIGKILLed
            # driver re-run at once) is taken over now rather than after it expires;
            # the take-over is the same atomic create as for an expired one.
            dead: Optional[str] = None
            if doc is not None and is_live(doc, now):
                dead = dead_owner_reason(doc.get("owner") or {})
                if dead is None:
                    raise self._in_progress(doc, now)
            mine = self._new_doc(now)
            asked = _clock()
            taken = self._backend.create(mine, after=token)
            if taken is not None:
                self._token, self._doc, self.owner = taken, mine, mine["owner"]
                self._confirmed_at = asked
                self.previous = doc if doc and not doc.get("released_at") else None
                if self.previous is not None:
                    why = dead or "its lease expired without release"
                    logger.warning("Run %s: its driver %s died (%s); taking the run over.",
                                   self.name,
                                   describe_owner(self.previous.get("owner", {})), why)
                self._start_heartbeat()
                return self
            # Another driver took it between our read and our write: read who, again.
        doc, _token = self._backend.read()
        raise self._in_progress(doc or {}, time.time())

    def _new_doc(self, now: float) -> Doc:
        owner = {"id": uuid.uuid4().hex, **_host_identity(), "pid": os.getpid(),
                 "process_started_at": _process_started_at(), "taken_at": now,
                 "orchestrator_run_id": orchestrator_run_id()}
        return {"version": 1, "run": self.name, "owner": owner, "heartbeat_at": now,
                "expires_at": now + self.ttl_s, "ttl_s": self.ttl_s, "released_at": None}

    def _in_progress(self, doc: Doc, now: float) -> RunInProgressError:
        owner = dict(doc.get("owner") or {})
        expires_at = float(doc.get("expires_at", now))
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(expires_at))
        return RunInProgressError(
            f"Run {self.name!r} ({self.storage.display()}) is being run by "
            f"{describe_owner(owner)}, whose lease expires at {when} (in "
            f"{max(0.0, expires_at - now):.0f} s) unless that driver renews it. Nothing "
            "was changed. Wait for that run to finish; if its driver is dead, retry after "
            f"the lease expires ({LEASE_S_ENV_VAR} sets its length), or use another run "
            "name.", owner=owner, expires_at=expires_at, run_name=self.name)

    # --- renewal and release ----------------------------------------------------------
    def _start_heartbeat(self) -> None:
        self._thread = threading.Thread(target=self._heartbeat, daemon=True,
                                        name=f"trainyard-lease-{self.name}"[:60])
        self._thread.start()

    def _heartbeat(self) -> None:
        period = max(0.05, self.ttl_s / 3.0)
        while not self._stop.wait(period):
            try:
                self.renew()
            except Exception as exc:  # noqa: BLE001 - storage blip: try again next time
                logger.warning("Run %s: could not renew its lease (%s: %s); retrying in "
                               "%.0f s.", self.name, type(exc).__name__, exc, period)
            if self.lost:
                return

    def renew(self) -> bool:
        """Push the expiry ``ttl_s`` ahead; False (and ``lost``) if another driver has
        taken the run over meanwhile."""
        with self._lock:
            if not self.held:
                return False
            now, asked = time.time(), _clock()
            doc = dict(self._doc, heartbeat_at=now, expires_at=now + self.ttl_s)
            token = self._backend.renew(doc, self._token)
            if token is None:
                self.lost = True
                logger.error("Run %s: another driver took its lease over (this driver "
                             "did not renew it for %.0f s); this driver writes nothing "
                             "more to the run and stops.", self.name, self.ttl_s)
                return False
            self._token, self._doc, self._confirmed_at = token, doc, asked
            return True

    # --- the fence ----------------------------------------------------------------------
    def check(self) -> None:
        """Return if this driver may write to the run now; raise otherwise.

        Called before every write to the run directory (``Storage.fence_with``) and by
        the controller's loop. No storage access while the lease was confirmed less
        than half its length ago; otherwise it is renewed first.

        Raises:
            RunOwnershipLostError: another driver owns the run now.
            ConnectionError: the lease could not be confirmed (the storage does not
                answer) and may have expired: a transient error, so a retried write
                tries again, checking again, for as long as its retry budget allows.
        """
        if self.lost:
            raise self.lost_error()
        if self._token is None:
            return  # not taken (yet), or released after the run's last write
        if _clock() - self._confirmed_at < self.ttl_s * _FRESH_SHARE:
            return
        try:
            self.renew()
        except Exception as exc:  # noqa: BLE001 - the storage's errors, re-raised below
            if _clock() - self._confirmed_at < self.ttl_s * _UNSURE_SHARE:
                return  # not confirmed, but no other driver can have taken it yet
            raise ConnectionError(
                f"Run {self.name}: could not confirm that this driver still owns the run "
                f"before writing to it ({type(exc).__name__}: {exc}).") from exc
        if self.lost:
            raise self.lost_error()

    def lost_error(self) -> RunOwnershipLostError:
        """The error of a lost lease, naming the driver that owns the run now (read
        once; ``.owner`` is empty when it could not be read)."""
        if self._lost_error is None:
            try:
                doc, _token = self._backend.read()
            except Exception:  # noqa: BLE001 - the message says "another driver"
                doc = None
            owner = dict((doc or {}).get("owner") or {})
            if owner.get("id") == self.owner.get("id"):
                owner = {}
            who = describe_owner(owner) if owner else "another driver"
            self._lost_error = RunOwnershipLostError(
                f"Run {self.name!r} ({self.storage.display()}) now belongs to {who}: this "
                f"driver did not renew its lease for more than {self.ttl_s:.0f} s (its "
                "process was stopped, or cut off from the storage) and that driver took "
                "the run over. This driver stopped its workers and wrote nothing more to "
                "the run (no checkpoint, no run record); the run goes on under its new "
                "owner, so do not retry this one: wait for that run, or read its result. "
                f"If drivers stall this long in normal operation, raise {LEASE_S_ENV_VAR}.",
                owner=owner, run_name=self.name)
        return self._lost_error

    def release(self) -> None:
        """Stop renewing and mark the lease released, so the next driver need not wait
        for it to expire. Never raises (a failed release only delays the next driver)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        with self._lock:
            if not self.held:
                return
            now = time.time()
            doc = dict(self._doc, heartbeat_at=now, expires_at=now, released_at=now)
            try:
                self._backend.renew(doc, self._token)
            except Exception as exc:  # noqa: BLE001
                logger.warning("Run %s: could not release its lease (%s: %s); the next "
                               "driver waits until it expires.", self.name,
                               type(exc).__name__, exc)
            self._token = None


def read_lease(storage: Storage) -> Optional[Doc]:
    """The run directory's current lease document (None: never taken)."""
    return _backend(storage).read()[0]
