"""Running a pipeline step as a Ray Job (execution mode ``ray_job``): the settings, names
and error every part of ``tasks.ray_jobs`` shares, and the caller an adapter sets.

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
* The job runs ``python -m tasks.ray_jobs.entry <job name>`` (``$TRAINYARD_RAY_JOB_PYTHON``
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
import os
import re
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Tuple

from engine import constants
from engine.storage import Storage, default_root, redact
from engine.exceptions import ConfigError, TrainyardError

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
ENTRY_MODULE = "tasks.ray_jobs.entry"
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
ATTEMPT_RE = re.compile(r"-a(\d+)$")


class JobFailedError(TrainyardError):
    """The step's Ray job failed or was stopped; a retry of the task resubmits it, and the
    new job resumes the engine run from its latest committed checkpoint."""


# --- settings -----------------------------------------------------------------------------
def execution_mode(explicit: Optional[str] = None) -> str:
    """``explicit``, else ``$TRAINYARD_EXECUTION``, else ``local``.

    Raises:
        ConfigError: an unknown mode.
    """
    mode = explicit or constants.get(EXECUTION_ENV_VAR) or LOCAL
    if mode not in MODES:
        raise ConfigError(f"execution={mode!r}: use 'local' (this process drives Ray) or "
                          f"'ray_job' (submit the step to a Ray cluster's job server); "
                          f"set it as run['execution'], execution=..., or "
                          f"${EXECUTION_ENV_VAR}.")
    return mode


# Ray's own token sources, in Ray's order (``ray._private.authentication``): a client
# that reads them as Ray's own clients do finds the token `ray job submit` would use.
RAY_TOKEN_ENV_VAR = "RAY_AUTH_TOKEN"
RAY_TOKEN_PATH_ENV_VAR = "RAY_AUTH_TOKEN_PATH"
RAY_DEFAULT_TOKEN_FILE = os.path.join("~", ".ray", "auth_token")


def job_token(explicit: Optional[str] = None) -> Tuple[Optional[str], str]:
    """``(token, where it came from)`` for the job server's token authentication (Ray's
    default): ``explicit`` (an Airflow connection's password, a Prefect block's secret),
    else ``$RAY_AUTH_TOKEN``, else the file ``$RAY_AUTH_TOKEN_PATH``, else
    ``~/.ray/auth_token``; ``(None, "")`` when none has one (a cluster without auth).

    Raises:
        ConfigError: ``$RAY_AUTH_TOKEN_PATH`` names a file that cannot be read or is
            empty (Ray's own clients refuse to go on, too).
    """
    if explicit:
        return explicit.strip(), "the orchestrator's connection"
    value = os.environ.get(RAY_TOKEN_ENV_VAR, "").strip()
    if value:
        return value, f"${RAY_TOKEN_ENV_VAR}"
    path = os.environ.get(RAY_TOKEN_PATH_ENV_VAR, "").strip()
    if path:
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as f:
                value = f.read().strip()
        except OSError as exc:
            raise ConfigError(f"${RAY_TOKEN_PATH_ENV_VAR} names {path!r}, which cannot be "
                              f"read ({exc.strerror}): point it at the cluster's token "
                              "file, or unset it.") from None
        if not value:
            raise ConfigError(f"${RAY_TOKEN_PATH_ENV_VAR} names {path!r}, which is empty: "
                              "put the cluster's token in it (`ray get-auth-token` on "
                              "the head prints it), or unset it.")
        return value, f"${RAY_TOKEN_PATH_ENV_VAR} ({path})"
    default = os.path.expanduser(RAY_DEFAULT_TOKEN_FILE)
    try:
        with open(default, encoding="utf-8") as f:
            value = f.read().strip()
    except OSError:
        return None, ""
    return (value, RAY_DEFAULT_TOKEN_FILE) if value else (None, "")


def job_address(explicit: Optional[str] = None) -> str:
    """The job server: ``explicit``, else ``$TRAINYARD_RAY_JOB_ADDRESS``, else
    ``$RAY_ADDRESS`` when it is a dashboard address (``http(s)://``).

    Raises:
        ConfigError: none of them gives an ``http(s)://`` address.
    """
    address = explicit or constants.get(JOB_ADDRESS_ENV_VAR)
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
    """``$TRAINYARD_RAY_JOB_POLL_S``: the longest wait between status polls."""
    return constants.get(JOB_POLL_S_ENV_VAR)


def job_storage_root(storage: Optional[str]) -> str:
    """The storage root a job and this process share.

    Raises:
        ConfigError: ``memory://`` (RAM of this machine; a job on a cluster cannot see
            it) or a relative path.
    """
    raw = storage or constants.given(constants.STORAGE_PATH_ENV_VAR) or ""
    if str(raw).startswith("memory://"):
        raise ConfigError(
            f"Storage {raw!r} is memory of this machine, which a Ray job cannot see: in "
            "execution='ray_job' mode use storage both sides reach (a shared file system "
            f"path, or s3://...) as run['storage'] or ${constants.STORAGE_PATH_ENV_VAR}.")
    root = default_root(storage)
    env_root = constants.given(constants.STORAGE_PATH_ENV_VAR)
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
    # The job server's token from the adapter's own secret store (an Airflow
    # connection's password, a Prefect block): never logged, stored or sent to the job.
    token: Optional[str] = field(default=None, repr=False)


_CALLER: ContextVar[Caller] = ContextVar("trainyard_job_caller", default=Caller())


@contextmanager
def caller(address: Optional[str] = None, on_log: Optional[Callable[[str], None]] = None,
           run_id: Optional[str] = None, token: Optional[str] = None) -> Iterator[Caller]:
    """Set the :class:`Caller` for the steps called inside the block."""
    token = _CALLER.set(Caller(address, on_log, run_id, token))
    try:
        yield _CALLER.get()
    finally:
        _CALLER.reset(token)


def current_caller() -> Caller:
    return _CALLER.get()


def orchestrator_run_id() -> Optional[str]:
    return current_caller().run_id or constants.given(ORCHESTRATOR_RUN_ID_ENV_VAR)
