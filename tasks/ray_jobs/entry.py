"""The entrypoint of a pipeline step's Ray job: ``python -m tasks.ray_jobs.entry <job name>``.

It reads the step's request from ``$TRAINYARD_STORAGE_PATH/jobs/<job name>/request.json``,
runs the step in ``local`` mode (this job's driver is the Ray driver, joining the
cluster at ``$RAY_ADDRESS``, which Ray sets for a job), and writes the reference to
``.../<submission id>.json``. An error is printed as one ``trainyard-job-error:`` JSON
line as well, which the orchestrator turns back into the same kind of error (a
configuration error stays non-retryable).

SIGTERM (``ray job stop``, a cancelled orchestrator task) interrupts the step like
Ctrl-C, so the engine tears its workers down and releases the run's lease before Ray's
follow-up SIGKILL; the next attempt then need not wait for the lease to expire.

Start-up is on the step's critical path (every job is a fresh process): the driver
joins the cluster (``ray.init()``, mostly waiting on Ray's servers) in a background
thread while the main thread reads the request, imports the pipeline and builds its
trainer; the engine's own ``ensure_ray()`` waits for that connection instead of
starting another (issue 19). Joined outside the main thread, Ray installs no SIGTERM
handler of its own, so the one above stays in force for the whole step.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Dict, List, Optional

from engine import constants
from engine.exceptions import ConfigError, RunInProgressError
from engine.storage import Storage, redact
from tasks import layout
from tasks.ray_jobs import results, settings


def _interrupt(signum: int, frame: Any) -> None:
    # Ray's core worker answers SIGTERM by arming a 3 s alarm that aborts the process
    # (`_exit_on_sigterm` in engine/_internal/ray_utils.py says more); the step's
    # clean-up (report the job stopped, release the run's lease) may take longer.
    signal.alarm(0)
    raise KeyboardInterrupt(f"signal {signum}: the Ray job was stopped")


def read_request(root: str, name: str) -> Dict[str, Any]:
    """The step's request.

    Raises:
        ConfigError: the request is not there: the storage is not shared.
    """
    uri = layout.sub(root, settings.JOBS_DIR, name, "request.json")
    st = Storage.from_path(uri)
    inner = st.root
    request = st.read_json(inner)
    if request is None:
        import socket

        raise ConfigError(
            f"The job's request {redact(uri)} is not visible on the Ray cluster "
            f"(host {socket.gethostname()}): the storage is not shared between the "
            "orchestrator and the cluster. In execution='ray_job' mode use storage both "
            "reach: a shared file system mounted at the same path, or s3://... "
            f"(run['storage'] or ${constants.STORAGE_PATH_ENV_VAR}).")
    return request


def step_call(request: Dict[str, Any]) -> Any:
    """The step's function and its arguments, forced to run here (``local``)."""
    from tasks.steps.prediction import batch_predict, evaluate
    from tasks.steps.training import train, tune

    steps = {"train": train, "tune": tune, "evaluate": evaluate,
             "batch_predict": batch_predict}
    step, kwargs = request["step"], dict(request["kwargs"])
    if step in ("train", "tune"):
        run = dict(kwargs.get("run") or {})
        run["storage"] = settings.job_storage_root(run.get("storage"))
        run.update(execution=settings.LOCAL, runtime_env=None)
        kwargs["run"] = run
    else:
        kwargs.update(execution=settings.LOCAL, runtime_env=None)
    return steps[step], kwargs


def _earlier_attempt(owner_run_id: str, name: str, submission_id: str) -> bool:
    """Whether a lease belongs to an earlier attempt of this job (whose driver is gone:
    Ray runs a new attempt only after the last one ended)."""
    tail = owner_run_id.rsplit("/", 1)[-1]
    return tail.startswith(f"{name}-a") and tail != submission_id


def run_step(request: Dict[str, Any], submission_id: str) -> Any:
    """Run the step; when the run is still leased by an earlier attempt that was killed
    before it could release it, wait for that lease to expire, once."""
    fn, kwargs = step_call(request)
    try:
        return fn(**kwargs)
    except RunInProgressError as exc:
        owner = str(exc.owner.get("orchestrator_run_id") or "")
        if not _earlier_attempt(owner, request["name"], submission_id):
            raise
        wait = max(0.0, float(exc.expires_at or time.time()) - time.time()) + 1.0
        print(f"The run is still leased by {owner}, an earlier attempt of this job that "
              f"ended without releasing it; waiting {wait:.0f} s for the lease to expire.",
              flush=True)
        time.sleep(wait)
        return fn(**kwargs)


class _NotMainThreadNotice(logging.Filter):
    """Drops Ray's notice that ``ray.init()`` outside the main thread sets no SIGTERM
    handler: this entry sets its own (:func:`_interrupt`) on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


def _connect_in_background() -> threading.Thread:
    """Join the job's cluster (``$RAY_ADDRESS``, set by Ray for a job's driver) while the
    main thread imports and prepares the step: ``ray.init()`` mostly waits on Ray's
    servers. The engine's ``ensure_ray()`` in the step waits for this one; an error
    here is left to that call, which raises it in the main thread."""
    import ray  # noqa: F401 - the heavy import here: the thread then mostly waits on Ray's servers

    from engine.runtime import ensure_ray

    logging.getLogger("ray._private.worker").addFilter(_NotMainThreadNotice())

    def connect() -> None:
        try:
            ensure_ray()
        except Exception:  # noqa: BLE001 - raised again by the step's own call
            pass

    thread = threading.Thread(target=connect, name="trainyard-ray-connect", daemon=True)
    thread.start()
    return thread


def _prewarm(after: Optional[threading.Thread] = None) -> None:
    """Import what the step needs only at its end (the learning curve's matplotlib) in
    the background while the step runs: this driver is idle then, and a fresh job
    process would otherwise pay the import after training, before the result. It waits
    for ``after`` (the cluster connection) and then for the step's own start-up
    imports, which are on the critical path, so as not to compete with them."""

    def load() -> None:
        if after is not None:
            after.join()
        time.sleep(_PREWARM_DELAY_S)
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot  # noqa: F401
        except Exception:  # noqa: BLE001 - the plot says so itself if it cannot
            pass

    threading.Thread(target=load, name="trainyard-prewarm", daemon=True).start()


#: Seconds after the cluster connection before the prewarm imports: the step's own
#: start-up (the run's lease, its workers' start and their framework's collective,
#: 4–6 s after the connection on the loaded 2-core development VM) runs first; a step
#: shorter than that pays the import at its end, as it would without the prewarm.
_PREWARM_DELAY_S = 10.0


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print(f"usage: python -m {settings.ENTRY_MODULE} <job name>", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    submission_id = constants.given(settings.JOB_SUBMISSION_ENV_VAR) or ""
    try:
        root = constants.given(constants.STORAGE_PATH_ENV_VAR)
        if not root:
            raise ConfigError(f"${constants.STORAGE_PATH_ENV_VAR} is not set in the job: "
                              "submit pipeline steps with execution='ray_job'.")
        connecting = _connect_in_background() if os.environ.get("RAY_ADDRESS") else None
        request = read_request(root, args[0])
        _prewarm(after=connecting)
        value = run_step(request, submission_id)
        uri = layout.sub(root, settings.JOBS_DIR, args[0], f"{submission_id}.json")
        st = Storage.from_path(uri)
        inner = st.root
        st.write_json_atomic(inner, results.encode_result(value, submission_id))
        print(f"{settings.RESULT_LINE_PREFIX}the {request['step']} step's result is in "
              f"{redact(uri)}", flush=True)
        return 0
    except (KeyboardInterrupt, SystemExit):  # stopped: Ray reports the job as STOPPED
        print("trainyard: the job was stopped; the run keeps its committed checkpoints.",
              file=sys.stderr, flush=True)
        return 1
    except BaseException as exc:  # noqa: BLE001 - reported to the orchestrator, then exit 1
        from engine.storage import scrub

        traceback.print_exc()
        line = json.dumps({"type": type(exc).__name__, "message": scrub(str(exc))[:8000]})
        print(settings.ERROR_LINE_PREFIX + line, file=sys.stderr, flush=True)
        return 1


def _exit_now(code: int) -> None:
    """Exit without the interpreter's slow teardown once the result is durable: the
    job ends (and the waiting task returns) as soon as the step is done, instead of
    after Ray's driver shutdown; Ray cleans up after an exited driver anyway."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
