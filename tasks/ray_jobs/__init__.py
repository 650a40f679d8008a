"""Running a pipeline step as a Ray Job (execution mode ``ray_job``).

``settings`` (the mode, the job server, job names, the caller an adapter sets),
``planning`` (a step's job, or None in ``local`` mode), ``submission`` (submit,
re-attach, wait), ``results`` (what the job reports back), ``shipping`` (the code that
travels with the job) and ``entry`` (``python -m tasks.ray_jobs.entry``, the job's
entry point). Only Ray's job-submission client is imported, and only when a job is
planned. The names below are the ones the orchestrator adapters use.
"""

from tasks.ray_jobs.planning import jsonable, plan
from tasks.ray_jobs.results import (LogTail, decode_result, default_log_sink, encode_result,
                                    job_error)
from tasks.ray_jobs.settings import (DEFAULT_POLL_S, ENTRY_MODULE, ERROR_LINE_PREFIX,
                                     EXECUTION_ENV_VAR, FORWARDED_ENV_VARS,
                                     JOB_ADDRESS_ENV_VAR, JOB_NAME_ENV_VAR,
                                     JOB_POLL_S_ENV_VAR, JOB_PYTHON_ENV_VAR,
                                     JOB_SUBMISSION_ENV_VAR, JOBS_DIR, LOCAL, MODES,
                                     ORCHESTRATOR_RUN_ID_ENV_VAR, RAY_JOB,
                                     RESULT_LINE_PREFIX, Caller, JobFailedError, caller,
                                     current_caller, digest, execution_mode, job_address,
                                     job_name, job_storage_root, orchestrator_run_id,
                                     poll_intervals, poll_seconds, strip_secrets)
from tasks.ray_jobs.submission import StepJob, connect, job_runtime_env

__all__ = [
    "plan", "jsonable", "LogTail", "decode_result", "default_log_sink", "encode_result",
    "job_error", "DEFAULT_POLL_S", "ENTRY_MODULE", "ERROR_LINE_PREFIX", "EXECUTION_ENV_VAR",
    "FORWARDED_ENV_VARS", "JOB_ADDRESS_ENV_VAR", "JOB_NAME_ENV_VAR", "JOB_POLL_S_ENV_VAR",
    "JOB_PYTHON_ENV_VAR", "JOB_SUBMISSION_ENV_VAR", "JOBS_DIR", "LOCAL", "MODES",
    "ORCHESTRATOR_RUN_ID_ENV_VAR", "RAY_JOB", "RESULT_LINE_PREFIX", "Caller",
    "JobFailedError", "caller", "current_caller", "digest", "execution_mode", "job_address",
    "job_name", "job_storage_root", "orchestrator_run_id", "poll_intervals", "poll_seconds",
    "strip_secrets", "StepJob", "connect", "job_runtime_env",
]
