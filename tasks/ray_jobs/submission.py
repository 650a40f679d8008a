"""Running a pipeline step as a Ray Job (execution mode ``ray_job``).

In ``ray_job`` mode a step that starts Ray work (``train``, ``tune``, ``evaluate``,
``batch_predict``) is not run by the calling process: it is submitted to a Ray cluster's
job server with ``ray.job_submission.JobSubmissionClient``, and the calling process (an
Airflow worker, a Prefect worker, a script) only submits, polls and reads the result
back. It never calls ``ray.init()`` and never imports torch or another framework.

    request   <storage>/jobs/<job name>/request.json        written here, read by the job
    result    <storage>/jobs/<job name>/<submission id>.json  written by the job

* The submission id is ``<job name>-a<attempt>``, the job name coming from the engine
  run name and the step, so a retried or restarted task finds its job again: a job that
  is pending or running is re-attached, one that succeeded gives its result, one that
  failed or was stopped is resubmitted as the next attempt, which resumes the engine run
  from its latest committed checkpoint.
* The job runs ``python -m tasks._job_entry <job name>`` (``$TRAINYARD_RAY_JOB_PYTHON``
  names another interpreter) with the trainyard installation of the cluster, or what
  ``runtime_env`` ships. Storage credentials and the storage root travel as environment
  variables of the job, never in the entrypoint, the job's metadata or the request.
* The job's log is streamed into this process's log, each line prefixed with the job.
* Interrupting the wait (a cancelled task: KeyboardInterrupt, SystemExit, an
  orchestrator's termination signal) stops the job.

Only Ray's job-submission client is imported here: ``ray`` itself is imported by it, but
no Ray instance is started or joined.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shlex
import time
import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from engine import constants
from engine import storage as _storage
from engine.storage import Storage, default_root, redact
from engine.exceptions import ConfigError, TrainyardError
from tasks import _shipping, _store

logger = logging.getLogger("tasks.jobs")

EXECUTION_ENV_VAR = constants.EXECUTION_ENV_VAR
JOB_ADDRESS_ENV_VAR = constants.RAY_JOB_ADDRESS_ENV_VAR
JOB_PYTHON_ENV_VAR = constants.RAY_JOB_PYTHON_ENV_VAR
JOB_POLL_S_ENV_VAR = constants.RAY_JOB_POLL_S_ENV_VAR
# Set by the orchestrator in the job's environment (runtime_env env_vars).
JOB_NAME_ENV_VAR = constants.JOB_NAME_ENV_VAR
JOB_SUBMISSION_ENV_VAR = constants.JOB_SUBMISSION_ID_ENV_VAR
ORCHESTRATOR_RUN_ID_ENV_VAR = constants.ORCHESTRATOR_RUN_ID_ENV_VAR
LOCAL, RAY_JOB = "local", "ray_job"
MODES = (LOCAL, RAY_JOB)
JOBS_DIR = "jobs"
ENTRY_MODULE = "tasks._job_entry"
DEFAULT_POLL_S = 1.0
ERROR_LINE_PREFIX = "trainyard-job-error: "
RESULT_LINE_PREFIX = "trainyard-job-result: "
# What the job needs from this process's environment to reach the storage (forwarded
# unless runtime_env's env_vars set them).
FORWARDED_ENV_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                      "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL",
                      "AWS_ENDPOINT_URL_S3", "GOOGLE_APPLICATION_CREDENTIALS",
                      constants.RUN_LEASE_S_ENV_VAR)
_MAX_NAME = 100
_ATTEMPT_RE = re.compile(r"-a(\d+)$")


class JobFailedError(TrainyardError):
    """The step's Ray job failed or was stopped; a retry of the task resubmits it, and the
    new job resumes the engine run from its latest committed checkpoint."""


# --- settings -----------------------------------------------------------------------------
def execution_mode(explicit: Optional[str] = None) -> str:
    """``explicit``, else ``$TRAINYARD_EXECUTION``, else ``local``.

    Raises:
        ConfigError: an unknown mode.
    """
    mode = explicit or os.environ.get(EXECUTION_ENV_VAR) or LOCAL
    if mode not in MODES:
        raise ConfigError(f"execution={mode!r}: use 'local' (this process drives Ray) or "
                          f"'ray_job' (submit the step to a Ray cluster's job server); "
                          f"set it as run['execution'], execution=..., or "
                          f"${EXECUTION_ENV_VAR}.")
    return mode


def job_address(explicit: Optional[str] = None) -> str:
    """The job server: ``explicit``, else ``$TRAINYARD_RAY_JOB_ADDRESS``, else
    ``$RAY_ADDRESS`` when it is a dashboard address (``http(s)://``).

    Raises:
        ConfigError: none of them gives an ``http(s)://`` address.
    """
    address = explicit or os.environ.get(JOB_ADDRESS_ENV_VAR)
    if not address:
        ray_address = os.environ.get("RAY_ADDRESS", "")
        address = ray_address if ray_address.startswith(("http://", "https://")) else ""
    if not address.startswith(("http://", "https://")):
        raise ConfigError(
            f"execution='ray_job' needs the Ray job server's address, e.g. "
            f"http://head-node:8265 (the dashboard port): set ${JOB_ADDRESS_ENV_VAR}, or "
            f"RAY_ADDRESS to an http(s):// address (got {address or 'nothing'!r}).")
    return address.rstrip("/")


def poll_intervals(longest: float, first: float = 0.1) -> Iterator[float]:
    """Seconds between status polls: from ``first``, growing by half each time up to
    ``longest`` (a short job's end is seen within a fraction of a second, a long one's
    server is not asked every 100 ms)."""
    interval = min(first, longest)
    while True:
        yield interval
        interval = min(longest, interval * 1.5)


def poll_seconds() -> float:
    try:
        return max(0.05, float(os.environ.get(JOB_POLL_S_ENV_VAR, DEFAULT_POLL_S)))
    except ValueError:
        return DEFAULT_POLL_S


def job_storage_root(storage: Optional[str]) -> str:
    """The storage root a job and this process share.

    Raises:
        ConfigError: ``memory://`` (RAM of this machine; a job on a cluster cannot see
            it) or a relative path.
    """
    raw = storage or os.environ.get(constants.STORAGE_PATH_ENV_VAR) or ""
    if str(raw).startswith("memory://"):
        raise ConfigError(
            f"Storage {raw!r} is memory of this machine, which a Ray job cannot see: in "
            "execution='ray_job' mode use storage both sides reach (a shared file system "
            f"path, or s3://...) as run['storage'] or ${constants.STORAGE_PATH_ENV_VAR}.")
    root = default_root(storage)
    env_root = os.environ.get(constants.STORAGE_PATH_ENV_VAR)
    # A root shown without credentials or endpoint (from a reference) reopens the full
    # one this process was given in the environment.
    if env_root and redact(env_root).rstrip("/") == redact(root).rstrip("/"):
        return env_root
    return root


def job_name(step: str, key: str) -> str:
    """A submission-id prefix for a step: letters, digits, ``-`` and ``_``, shortened
    with a digest when long."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", f"trainyard-{step}-{key}").strip("-")
    if len(name) > _MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = f"{name[:_MAX_NAME - 13]}-{digest}"
    return name


def digest(*parts: Any) -> str:
    """A short digest of JSON-able values (for job names of steps without a run)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def strip_secrets(value: Any) -> Any:
    """A copy of a JSON value whose URIs carry no credentials or endpoint query (the
    request is stored; the job reopens bare URIs from the storage root it is given)."""
    if isinstance(value, dict):
        return {k: strip_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strip_secrets(v) for v in value]
    if isinstance(value, str) and "://" in value and ("@" in value or "?" in value):
        return redact(value)
    return value


# --- what the orchestrator adapters add ---------------------------------------------------
@dataclass
class Caller:
    """What an orchestrator adapter knows about the step's call: the job server from its
    own configuration (an Airflow connection), where the job's log goes (the task's
    logger), and its run id (shown as the run lease's owner, keys evaluate/predict jobs)."""

    address: Optional[str] = None
    on_log: Optional[Callable[[str], None]] = None
    run_id: Optional[str] = None


_CALLER: ContextVar[Caller] = ContextVar("trainyard_job_caller", default=Caller())


@contextmanager
def caller(address: Optional[str] = None, on_log: Optional[Callable[[str], None]] = None,
           run_id: Optional[str] = None) -> Iterator[Caller]:
    """Set the :class:`Caller` for the steps called inside the block."""
    token = _CALLER.set(Caller(address, on_log, run_id))
    try:
        yield _CALLER.get()
    finally:
        _CALLER.reset(token)


def current_caller() -> Caller:
    return _CALLER.get()


def orchestrator_run_id() -> Optional[str]:
    return current_caller().run_id or os.environ.get(ORCHESTRATOR_RUN_ID_ENV_VAR) or None


# --- planning a step's job ----------------------------------------------------------------
def plan(step: str, kwargs: Dict[str, Any]) -> Optional["StepJob"]:
    """The Ray job of a step call in ``ray_job`` mode (connected to the job server), or
    None in ``local`` mode. Every input error is raised here, before anything is written.

    Args:
        step: ``train``, ``tune``, ``evaluate`` or ``batch_predict``.
        kwargs: The step's keyword arguments as ``tasks.core`` takes them.

    Raises:
        ConfigError: an unknown mode or pipeline, no job address, a job server that
            does not answer, ``memory://`` storage, a malformed runtime_env.
    """
    if step in ("train", "tune"):
        run = dict(kwargs.get("run") or {})
        if execution_mode(run.get("execution")) == LOCAL:
            return None
        _check_pipeline(kwargs["pipeline"])
        run.setdefault("name", None)
        run["name"] = run["name"] or (f"{kwargs['pipeline']}-{step}-"
                                      f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")
        kwargs = {**kwargs, "run": run}
        storage, runtime_env, key = run.get("storage"), run.get("runtime_env"), run["name"]
        pipeline: Optional[str] = kwargs["pipeline"]
    else:
        if execution_mode(kwargs.get("execution")) == LOCAL:
            return None
        from tasks.refs import CheckpointRef, DatasetRef

        ckpt = CheckpointRef.from_dict(kwargs["checkpoint"])
        data = DatasetRef.from_dict(kwargs["dataset"])
        storage, runtime_env, pipeline = ckpt.storage, kwargs.get("runtime_env"), ckpt.pipeline
        key = digest(ckpt.uri, data.fingerprint, {k: v for k, v in kwargs.items() if k not in (
            "checkpoint", "dataset", "execution", "runtime_env")}, orchestrator_run_id())
    job_runtime_env(runtime_env, "", "", "", None)  # validates its shape
    # The pipeline plugin's code goes with the job unless runtime_env ships it (issue 21).
    runtime_env = _shipping.with_pipeline(runtime_env, pipeline)
    job = StepJob(step=step, kwargs=jsonable(kwargs), name=job_name(step, key),
                  storage=job_storage_root(storage),
                  address=job_address(current_caller().address),
                  runtime_env=runtime_env, orchestrator_run_id=orchestrator_run_id())
    job.client  # noqa: B018 - connect now: an unreachable server fails before any write
    return job


def _check_pipeline(name: str) -> None:
    from pipelines import UnknownPipelineError, list_pipelines

    if name not in list_pipelines():
        raise UnknownPipelineError(f"Unknown pipeline {name!r}: use one of "
                                   f"{list_pipelines()}.")


def jsonable(value: Any) -> Any:
    """References (and dicts/lists of them) as plain JSON values."""
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


# --- one step as a job --------------------------------------------------------------------
@dataclass
class StepJob:
    """One pipeline step submitted as a Ray job.

    Args:
        step: ``train``, ``tune``, ``evaluate`` or ``batch_predict``.
        kwargs: The step's JSON arguments (references as dicts).
        name: The job name (:func:`job_name`): the same for every retry of the step.
        storage: The storage root both sides reach (may carry credentials: it goes to
            the job as an environment variable only).
        address: The job server (:func:`job_address`).
        runtime_env: Ray's runtime_env for the job (``working_dir``, ``pip``,
            ``env_vars`` …); None: the cluster's own trainyard installation.
        orchestrator_run_id: Shown as the run lease's owner.
    """

    step: str
    kwargs: Dict[str, Any]
    name: str
    storage: str
    address: str
    runtime_env: Optional[Dict[str, Any]] = None
    orchestrator_run_id: Optional[str] = None
    _client: Any = field(default=None, repr=False)

    # --- where things are ---------------------------------------------------------------
    @property
    def dir(self) -> str:
        return _store.sub(self.storage, JOBS_DIR, self.name)

    def result_uri(self, submission_id: str) -> str:
        return _store.sub(self.dir, f"{submission_id}.json")

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = connect(self.address)
        return self._client

    # --- submit or re-attach --------------------------------------------------------------
    def attempts(self) -> List[Any]:
        """This step's jobs on the cluster, oldest attempt first."""
        pattern = re.compile(re.escape(self.name) + r"-a(\d+)$")
        found = []
        for job in self.client.list_jobs():
            match = pattern.match(job.submission_id or "")
            if match:
                found.append((int(match.group(1)), job))
        return [job for _n, job in sorted(found, key=lambda t: t[0])]

    def submit_or_attach(self) -> str:
        """The submission id to wait for: the latest attempt if it is pending, running
        or succeeded, else a new attempt (after one that failed or was stopped)."""
        jobs = self.attempts()
        latest = jobs[-1] if jobs else None
        if latest is not None and str(latest.status) in ("PENDING", "RUNNING", "SUCCEEDED"):
            logger.info("Re-attaching to Ray job %s (%s).", latest.submission_id,
                        latest.status)
            return latest.submission_id
        attempt = 1 if latest is None else int(
            _ATTEMPT_RE.search(latest.submission_id).group(1)) + 1
        if latest is not None:
            logger.warning("Ray job %s ended %s; submitting attempt %d, which resumes from "
                           "the latest committed checkpoint.", latest.submission_id,
                           latest.status, attempt)
        return self._submit(f"{self.name}-a{attempt}")

    def _submit(self, submission_id: str) -> str:
        st = Storage.from_path(_store.sub(self.dir, "request.json"))
        inner = st.root
        st.write_json_atomic(inner, {"step": self.step, "kwargs": strip_secrets(self.kwargs),
                                     "name": self.name})
        python = os.environ.get(JOB_PYTHON_ENV_VAR, "python")
        entrypoint = f"{shlex.quote(python)} -m {ENTRY_MODULE} {shlex.quote(self.name)}"
        runtime_env = job_runtime_env(self.runtime_env, self.storage, self.name,
                                      submission_id, self.orchestrator_run_id)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.submit_job(entrypoint=entrypoint, submission_id=submission_id,
                                       runtime_env=runtime_env,
                                       metadata=self.metadata())
                break
            except RuntimeError as exc:
                if "already exists" in str(exc):  # a twin of this task submitted it
                    logger.info("Ray job %s exists already: attaching.", submission_id)
                    return submission_id
                # A cluster that just started has a job server before its job agent.
                if "No available agent" not in str(exc) or time.monotonic() > deadline:
                    raise JobFailedError(f"Could not submit Ray job {submission_id} to "
                                         f"{self.address}: {_first_line(exc)}") from None
                time.sleep(1.0)
        logger.info("Submitted Ray job %s to %s: %s.", submission_id, self.address,
                    entrypoint)
        return submission_id

    def metadata(self) -> Dict[str, str]:
        """The job's metadata (shown by Ray's job API: nothing secret)."""
        out = {"trainyard_step": self.step, "trainyard_job": self.name}
        if self.orchestrator_run_id:
            out["trainyard_orchestrator_run"] = self.orchestrator_run_id
        return out

    # --- waiting and the outcome ----------------------------------------------------------
    def wait(self, submission_id: str, on_log: Optional[Callable[[str], None]] = None,
             poll_s: Optional[float] = None) -> str:
        """Poll until the job ends, streaming its log; stop the job if interrupted.
        Returns the terminal status."""
        tail = LogTail(self.client, submission_id, on_log or default_log_sink(submission_id))
        tail.start()
        try:
            for interval in poll_intervals(poll_s or poll_seconds()):
                status = self._status(submission_id)
                if status == "SUCCEEDED" or (status == "RUNNING"
                                             and self._result_written(submission_id)):
                    # The step is done (its driver may still be exiting): its last lines
                    # come from its whole log at once, not from the stream, which can
                    # take seconds to close on a busy head.
                    self._last_lines(tail, submission_id)
                    return "SUCCEEDED"
                if status in ("FAILED", "STOPPED"):
                    tail.finish()
                    return status
                # The job's result line in its log wakes this at once; the status
                # poll covers a log stream that lags or fails.
                if tail.ended:
                    time.sleep(interval)  # seen, but the result is not visible yet
                else:
                    tail.wait_for_end(timeout=interval)
            raise AssertionError("unreachable")  # poll_intervals never ends
        except BaseException as exc:
            if not isinstance(exc, Exception):  # cancelled: the job goes too
                self.stop(submission_id)
            raise
        finally:
            tail.close()

    def _last_lines(self, tail: "LogTail", submission_id: str) -> None:
        """The job's last log lines into the task's log: read at once from the job's
        log (the stream lags it), else waited for from the stream (3 s at most)."""
        if tail.ended:
            return
        try:
            tail.catch_up(self.client.get_job_logs(submission_id) or "")
        except Exception:  # noqa: BLE001 - logs are a convenience
            tail.wait_for_end(timeout=3.0)

    def _result_written(self, submission_id: str) -> bool:
        try:
            st = Storage.from_path(self.result_uri(submission_id))
            inner = st.root
            return st.exists(inner)
        except Exception:  # noqa: BLE001 - the job's status decides then
            return False

    def _status(self, submission_id: str, patience_s: float = 60.0) -> str:
        """The job's status; a job server that does not answer for a while (a head
        restarting, a network blip) is asked again for up to ``patience_s``."""
        deadline = time.monotonic() + patience_s
        while True:
            try:
                return str(self.client.get_job_status(submission_id))
            except Exception as exc:  # requests' ConnectionError, a 5xx as RuntimeError
                if "does not exist" in str(exc) or time.monotonic() > deadline:
                    raise JobFailedError(f"Lost track of Ray job {submission_id} at "
                                         f"{self.address}: {_first_line(exc)}; a retry of "
                                         "the task re-attaches to it.") from None
                logger.warning("Ray job server %s did not answer (%s); asking again.",
                               self.address, _first_line(exc))
                time.sleep(2.0)

    def stop(self, submission_id: str) -> None:
        """Stop the job (a cancelled orchestrator task must not leave it running)."""
        try:
            self.client.stop_job(submission_id)
            logger.warning("Stopped Ray job %s (the task was cancelled).", submission_id)
        except Exception as exc:  # noqa: BLE001 - the cancellation goes on regardless
            logger.error("Could not stop Ray job %s: %s", submission_id, _first_line(exc))

    def outcome(self, submission_id: str, status: str) -> Any:
        """The step's reference for a job that succeeded; the job's error otherwise."""
        if status == "SUCCEEDED":
            st = Storage.from_path(self.result_uri(submission_id))
            inner = st.root
            payload = st.read_json(inner)
            if payload is None:
                raise JobFailedError(f"Ray job {submission_id} succeeded but wrote no "
                                     f"result to {redact(self.result_uri(submission_id))}.")
            return decode_result(payload)
        raise self.error_of(submission_id, status)

    def error_of(self, submission_id: str, status: str) -> BaseException:
        info = self.client.get_job_info(submission_id)
        text = info.message or ""
        try:
            text = self.client.get_job_logs(submission_id) or text
        except Exception:  # noqa: BLE001 - the message has the log's tail already
            pass
        return job_error(submission_id, status, getattr(info, "error_type", None), text)

    def run(self, on_log: Optional[Callable[[str], None]] = None) -> Any:
        """Submit (or re-attach), wait, and return the step's reference."""
        submission_id = self.submit_or_attach()
        status = self.wait(submission_id, on_log or current_caller().on_log)
        return self.outcome(submission_id, status)


# --- helpers --------------------------------------------------------------------------------
# One client per job server and process: a flow's steps share it (its construction
# asks the server for its version, a round trip per step otherwise).
_CLIENTS: Dict[str, Any] = {}


def connect(address: str) -> Any:
    """A JobSubmissionClient (this process's one for the address), or a ConfigError that
    says how to fix the address."""
    if address in _CLIENTS:
        return _CLIENTS[address]
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:
        raise ConfigError("execution='ray_job' needs Ray's job-submission client: pip "
                          "install 'trainyard[jobs]' (ray[default]).") from exc
    try:
        client = _CLIENTS[address] = JobSubmissionClient(address)
        return client
    except Exception as exc:  # ConnectionError, AuthenticationError, RuntimeError
        raise ConfigError(
            f"Cannot reach a Ray job server at {address} ({type(exc).__name__}: "
            f"{_first_line(exc)}). Start the cluster with its dashboard (`ray start --head "
            f"--dashboard-host 0.0.0.0`, needs 'ray[default]'), and set "
            f"${JOB_ADDRESS_ENV_VAR} (or RAY_ADDRESS) to http://<head>:8265.") from None


def job_runtime_env(user: Optional[Dict[str, Any]], storage: str, name: str,
                    submission_id: str, orchestrator_run_id: Optional[str]) -> Dict[str, Any]:
    """Ray's runtime_env for the job: the user's, plus what the job must know in its
    environment (the storage root, credentials, who it runs for)."""
    if user is not None and not isinstance(user, dict):
        raise ConfigError("run['runtime_env'] must be Ray's runtime_env dict, e.g. "
                          "{'working_dir': '.', 'pip': ['scikit-learn']}.")
    env = dict((user or {}).get("env_vars") or {})
    for key in FORWARDED_ENV_VARS:
        if key not in env and os.environ.get(key):
            env[key] = os.environ[key]
    owner = f"{orchestrator_run_id}/{submission_id}" if orchestrator_run_id else submission_id
    env.update({constants.STORAGE_PATH_ENV_VAR: storage, JOB_NAME_ENV_VAR: name,
                JOB_SUBMISSION_ENV_VAR: submission_id, ORCHESTRATOR_RUN_ID_ENV_VAR: owner})
    return {**(user or {}), "env_vars": env}


def decode_result(payload: Dict[str, Any]) -> Any:
    from tasks.refs import CheckpointRef, DatasetRef, TuneRef

    types = {"CheckpointRef": CheckpointRef, "TuneRef": TuneRef, "DatasetRef": DatasetRef}
    kind, value = payload.get("type"), payload.get("value")
    return types[kind].from_dict(value) if kind in types else value


def encode_result(value: Any, submission_id: str) -> Dict[str, Any]:
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return {"type": type(value).__name__, "value": to_dict(),
                "submission_id": submission_id}
    return {"type": "json", "value": value, "submission_id": submission_id}


def job_error(submission_id: str, status: str, error_type: Optional[str],
              logs: str) -> BaseException:
    """The error a task raises for a job that did not succeed: the job entry's own
    (its last ``trainyard-job-error:`` line) when it printed one, so that configuration
    errors stay non-retryable; else :class:`JobFailedError` with the log's tail."""
    reported = None if status == "STOPPED" else _reported_error(logs)
    if reported is not None:
        kind, message = reported
        return _error_class(kind)(f"Ray job {submission_id}: {message}")
    tail = "\n".join(_storage.scrub(logs).strip().splitlines()[-15:])
    if error_type == "RUNTIME_ENV_SETUP_FAILURE":
        return ConfigError(f"Ray job {submission_id}: its runtime_env could not be set up; "
                           f"fix run['runtime_env'] (or runtime_env=...):\n{tail}")
    verb = "was stopped" if status == "STOPPED" else "failed"
    return JobFailedError(f"Ray job {submission_id} {verb}; a retry of the task resubmits "
                          f"it and resumes from the latest checkpoint. Its log ends:\n{tail}")


def _reported_error(logs: str) -> Optional[Tuple[str, str]]:
    for line in reversed(logs.splitlines()):
        if line.startswith(ERROR_LINE_PREFIX):
            try:
                data = json.loads(line[len(ERROR_LINE_PREFIX):])
                return str(data["type"]), _storage.scrub(str(data["message"]))
            except (ValueError, KeyError):
                return None
    return None


def _error_class(kind: str) -> type:
    from engine import exceptions
    from pipelines import UnknownPipelineError
    from tasks.refs import RefError

    known = {c.__name__: c for c in (ConfigError, RefError, UnknownPipelineError,
                                     exceptions.StorageError, exceptions.CheckpointError,
                                     exceptions.TrainingFailedError,
                                     exceptions.RunInProgressError)}
    known["TaskError"] = JobFailedError  # tasks.core.TaskError: a failed step, retried
    return known.get(kind, JobFailedError)


def _first_line(exc: BaseException) -> str:
    text = _storage.scrub(str(exc)).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


def default_log_sink(submission_id: str) -> Callable[[str], None]:
    def sink(line: str) -> None:
        logger.info("%s", line)

    return sink


class LogTail:
    """Streams a job's log lines to ``sink`` (prefixed ``[ray job <id>]``) from a thread
    that follows Ray's log websocket."""

    def __init__(self, client: Any, submission_id: str, sink: Callable[[str], None]) -> None:
        import threading

        self.client, self.submission_id, self.sink = client, submission_id, sink
        self.prefix = f"[ray job {submission_id}] "
        self._done = threading.Event()
        self._end_seen = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"trainyard-log-{submission_id}"[:60])
        self._partial = ""
        self._lock = threading.Lock()
        self._emitted = 0  # complete lines passed to the sink
        self._caught_up = False

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        import asyncio

        try:
            asyncio.run(self._follow())
        except Exception as exc:  # noqa: BLE001 - logs are a convenience
            logger.debug("Log tail of %s ended: %s", self.submission_id, exc)

    async def _follow(self) -> None:
        async for chunk in self.client.tail_job_logs(self.submission_id):
            self.feed(chunk)
            if self._done.is_set():
                break
        self.flush()

    def feed(self, chunk: str) -> None:
        with self._lock:
            if self._caught_up:  # catch_up() sent the rest already
                return
            text = self._partial + chunk
            *lines, self._partial = text.split("\n")
            self._emit(lines)

    def _emit(self, lines: List[str]) -> None:
        for line in lines:
            if line.startswith(RESULT_LINE_PREFIX):
                self._end_seen.set()
            self.sink(self.prefix + _storage.scrub(line.rstrip("\r")))
        self._emitted += len(lines)

    def catch_up(self, full_log: str) -> None:
        """Send the lines of the job's whole log (``get_job_logs``) that the stream has
        not delivered yet, and stop the stream's: Ray's log stream lags the log file by
        a second or more, and the job is done."""
        with self._lock:
            if self._caught_up:
                return
            self._caught_up = True
            lines = full_log.split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            self._partial = ""
            self._emit(lines[self._emitted:])
            self._end_seen.set()

    def flush(self) -> None:
        with self._lock:
            if self._partial and not self._caught_up:
                self.sink(self.prefix + _storage.scrub(self._partial))
                self._partial = ""

    @property
    def ended(self) -> bool:
        """Whether the job's last line (the entry's result line) has come through."""
        return self._end_seen.is_set()

    def wait_for_end(self, timeout: float) -> None:
        """Until the job's last line (the entry's result line) has come through."""
        self._end_seen.wait(timeout)

    def finish(self, timeout: float = 2.0) -> None:
        """Let the tail drain what the job wrote last (its socket closes at job end)."""
        self._thread.join(timeout)

    def close(self) -> None:
        self._done.set()
