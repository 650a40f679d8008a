"""One step as a Ray job: submit it (or re-attach to the attempt already running),
stream its log, wait, and read its reference back from storage.

The submission id is ``<job name>-a<attempt>``, so a retried task finds its job again;
see :mod:`tasks.ray_jobs.settings` for the whole protocol.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shlex
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional

from engine import constants
from engine.storage import Storage, redact
from engine.exceptions import ConfigError
from tasks import layout
from tasks.ray_jobs.results import (LogTail, decode_result, default_log_sink, first_line,
                                    job_error)
from tasks.ray_jobs.settings import (ENTRY_MODULE, FORWARDED_ENV_VARS, JOBS_DIR,
                                     JOB_ADDRESS_ENV_VAR, JOB_NAME_ENV_VAR, JOB_PYTHON_ENV_VAR,
                                     JOB_SUBMISSION_ENV_VAR, JobFailedError,
                                     ORCHESTRATOR_RUN_ID_ENV_VAR, ATTEMPT_RE, current_caller,
                                     RAY_DEFAULT_TOKEN_FILE, RAY_TOKEN_ENV_VAR,
                                     RAY_TOKEN_PATH_ENV_VAR, job_token, orchestrator_run_id,
                                     poll_intervals, poll_seconds, strip_secrets)

logger = logging.getLogger("tasks.jobs")
#: Seconds after a re-attach within which the job's ``STOPPED`` end is taken for the
#: stop of a cleared try (``StepJob.stopped_for_a_rerun``), not a stop by hand.
RERUN_STOP_WINDOW_S = 60.0


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
    token: Optional[str] = field(default=None, repr=False)  # see settings.job_token
    _client: Any = field(default=None, repr=False)
    _reattached_at: Optional[float] = field(default=None, repr=False)

    # --- where things are ---------------------------------------------------------------
    @property
    def dir(self) -> str:
        return layout.sub(self.storage, JOBS_DIR, self.name)

    def result_uri(self, submission_id: str) -> str:
        return layout.sub(self.dir, f"{submission_id}.json")

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = connect(self.address, self.token)
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
            self._reattached_at = time.time() if str(latest.status) != "SUCCEEDED" else None
            return latest.submission_id
        self._reattached_at = None
        attempt = 1 if latest is None else int(
            ATTEMPT_RE.search(latest.submission_id).group(1)) + 1
        if latest is not None:
            logger.warning("Ray job %s ended %s; submitting attempt %d, which resumes from "
                           "the latest committed checkpoint.", latest.submission_id,
                           latest.status, attempt)
        return self._submit(f"{self.name}-a{attempt}")

    def _submit(self, submission_id: str) -> str:
        st = Storage.from_path(layout.sub(self.dir, "request.json"))
        inner = st.root
        st.write_json_atomic(inner, {"step": self.step, "kwargs": strip_secrets(self.kwargs),
                                     "name": self.name})
        python = constants.get(JOB_PYTHON_ENV_VAR) or "python"
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
                                         f"{self.address}: {first_line(exc)}") from None
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
                                         f"{self.address}: {first_line(exc)}; a retry of "
                                         "the task re-attaches to it.") from None
                logger.warning("Ray job server %s did not answer (%s); asking again.",
                               self.address, first_line(exc))
                time.sleep(2.0)

    @property
    def reattached_at(self) -> Optional[float]:
        """When :meth:`submit_or_attach` re-attached to a pending or running job (None:
        it submitted one, or found one that had succeeded)."""
        return self._reattached_at

    def stopped_for_a_rerun(self, submission_id: str, reattached_at: Optional[float]
                            ) -> bool:
        """Whether the job this attempt re-attached to was stopped for this attempt's
        sake: a user cleared the task while it waited on the job, so the triggerer
        stopped the job (the cleared try's ``on_kill``) just as the new try found it
        still running and re-attached. The job then ends ``STOPPED`` within
        :data:`RERUN_STOP_WINDOW_S` of the re-attach; the rerun the user asked for
        should submit the next attempt, not fail with the stop meant for its
        predecessor. A job stopped later (``ray job stop`` by hand) still fails the
        task."""
        if reattached_at is None:
            return False
        info = self.client.get_job_info(submission_id)
        ended = (info.end_time or 0) / 1000.0
        return str(info.status) == "STOPPED" and \
            reattached_at - 5.0 <= ended <= reattached_at + RERUN_STOP_WINDOW_S

    def stop(self, submission_id: str) -> None:
        """Stop the job (a cancelled orchestrator task must not leave it running)."""
        try:
            self.client.stop_job(submission_id)
            logger.warning("Stopped Ray job %s (the task was cancelled).", submission_id)
        except Exception as exc:  # noqa: BLE001 - the cancellation goes on regardless
            logger.error("Could not stop Ray job %s: %s", submission_id, first_line(exc))

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


def connect(address: str, token: Optional[str] = None) -> Any:
    """A JobSubmissionClient (this process's one for the address and token), or a
    ConfigError that says how to fix the address or the token.

    The token (:func:`~tasks.ray_jobs.settings.job_token`: ``token``, else Ray's own
    sources) goes in the ``Authorization`` header, as Ray's own clients send it; without
    one, the server must run without token authentication.
    """
    token, source = job_token(token)
    key = f"{address} {hashlib.sha256((token or '').encode()).hexdigest()[:16]}"
    if key in _CLIENTS:
        return _CLIENTS[key]
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:
        raise ConfigError("execution='ray_job' needs Ray's job-submission client: pip "
                          "install 'trainyard[jobs]' (ray[default]).") from exc
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        with _address_as_given():
            client = JobSubmissionClient(address, headers=headers)
    except Exception as exc:  # ConnectionError, AuthenticationError, RuntimeError
        if _is_auth_error(exc):
            raise ConfigError(_auth_advice(address, source)) from None
        raise ConfigError(
            f"Cannot reach a Ray job server at {address} ({type(exc).__name__}: "
            f"{first_line(exc)}). Start the cluster with its dashboard (`ray start --head "
            f"--dashboard-host 0.0.0.0`, needs 'ray[default]'), and set "
            f"${JOB_ADDRESS_ENV_VAR} (or RAY_ADDRESS) to http://<head>:8265.") from None
    try:
        client.list_jobs()  # the version check above is not authenticated: this is
    except Exception as exc:  # noqa: BLE001 - classified just below
        if _is_auth_error(exc):
            raise ConfigError(_auth_advice(address, source)) from None
        raise
    _CLIENTS[key] = client
    return client


# Ray's client takes $RAY_API_SERVER_ADDRESS, else $RAY_ADDRESS, over the address it is
# given (``ray.dashboard.utils.get_address_for_submission_client``): an Airflow or
# Prefect worker whose local-mode tasks join a cluster through RAY_ADDRESS would send its
# ray_job steps there instead of to the job server it names. The client reads them only
# while it is made, so they are hidden for that moment (this process makes its clients
# under this lock; nothing in it reads them meanwhile: it never calls ray.init()).
_ADDRESS_OVERRIDES = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
_ENV_LOCK = threading.Lock()


@contextmanager
def _address_as_given() -> Iterator[None]:
    with _ENV_LOCK:
        saved = {k: os.environ.pop(k) for k in _ADDRESS_OVERRIDES if k in os.environ}
        try:
            yield
        finally:
            os.environ.update(saved)


def _is_auth_error(exc: BaseException) -> bool:
    text = str(exc)
    return type(exc).__name__ in ("AuthenticationError", "PermissionError") or any(
        s in text for s in ("401", "403", "Unauthorized", "authentication", "Forbidden"))


def _auth_advice(address: str, source: str) -> str:
    what = (f"refused the token from {source}" if source
            else "requires a token (token authentication, Ray's default) and none was found")
    return (f"The Ray job server at {address} {what}. Give the orchestrator the "
            "cluster's token (`ray get-auth-token` on the head prints it): the password "
            "of the Airflow connection ($TRAINYARD_RAY_CONN_ID, default trainyard_ray), "
            "the Prefect Secret block $TRAINYARD_PREFECT_RAY_TOKEN_BLOCK names, "
            f"${RAY_TOKEN_ENV_VAR}, the file ${RAY_TOKEN_PATH_ENV_VAR}, or "
            f"{RAY_DEFAULT_TOKEN_FILE}, as for `ray job submit`. Keep it out of DAG files, "
            "flow parameters and storage paths.")


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
