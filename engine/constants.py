"""Knobs of the engine: environment variables and their defaults, in one place.

Every ``TRAINYARD_*`` environment variable that trainyard reads (the engine, the
orchestrator tasks, the build scripts, the test suite) is declared here with
:func:`_setting`, which records its default and a one-line description in
:data:`SETTINGS`. The docs' settings page (docs/guides/settings.md) has its table
generated from it::

    python scripts/gen_settings_table.py             # rewrite the table on that page
    python scripts/gen_settings_table.py --markdown  # print it

(``tests/unit/test_settings.py`` checks that the two agree and that no other
``TRAINYARD_*`` name is used anywhere.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, its default and what it does.

    Args:
        name: The variable (``TRAINYARD_…``).
        default: The value used when it is unset (None: no value, or a computed one).
        description: One line: what it changes, for the settings page's table.
        scope: Who reads it: ``engine``, ``internal`` (set by the engine for its own
            processes), ``Airflow``, ``build`` or ``tests``.
        default_text: How the table shows a default that is computed or needs words
            (e.g. ``"max(4, CPU count)"``); empty: the default value itself.
    """

    name: str
    default: Any
    description: str
    scope: str = "engine"
    default_text: str = ""


#: Every setting, by name, in the order declared here (the settings table's order).
SETTINGS: Dict[str, Setting] = {}


def _setting(name: str, default: Any, description: str, scope: str = "engine",
             default_text: str = "") -> str:
    """Declare ``name`` in :data:`SETTINGS`; returns the name (for ``*_ENV_VAR``)."""
    if not name.startswith("TRAINYARD_") or name in SETTINGS:
        raise ValueError(f"setting {name!r}: a new TRAINYARD_* name")
    SETTINGS[name] = Setting(name, default, description, scope, default_text)
    return name

# Where runs are stored when RunConfig(storage_path=None).
DEFAULT_STORAGE_PATH = os.path.join("~", "trainyard_results")
STORAGE_PATH_ENV_VAR = _setting(
    "TRAINYARD_STORAGE_PATH", DEFAULT_STORAGE_PATH,
    "Where runs, data sets and models go when no storage path is given: a local path or "
    "an s3://, gs://, memory:// URI.")

# Logical CPUs given to the embedded Ray when none is running. Ray's CPU counts are
# logical: on a 2-core laptop two 1-CPU workers would otherwise leave nothing for Ray
# Data tasks, which then wait forever.
DEFAULT_MIN_RAY_NUM_CPUS = 4
RAY_NUM_CPUS_ENV_VAR = _setting(
    "TRAINYARD_RAY_NUM_CPUS", None,
    "Logical CPUs of the local Ray started when none is running (RAY_ADDRESS joins a "
    "cluster instead).", default_text=f"max({DEFAULT_MIN_RAY_NUM_CPUS}, CPU count)")

# Ray starts worker processes at nice 15 so that its daemons stay responsive; the local
# instance's workers are its main job and run at the priority torchrun's would have.
DEFAULT_RAY_WORKER_NICENESS = 0
RAY_WORKER_NICENESS_ENV_VAR = _setting(
    "TRAINYARD_RAY_WORKER_NICENESS", DEFAULT_RAY_WORKER_NICENESS,
    "Niceness of the local Ray's worker processes (Ray's own default is 15).")

# At a script's exit Ray sleeps half a second so that the workers' last output reaches
# the console; the engine shuts its local instance down as soon as that output is
# streamed, waiting at most this long.
DEFAULT_RAY_EXIT_LOG_WAIT_S = 0.5
RAY_EXIT_LOG_WAIT_ENV_VAR = _setting(
    "TRAINYARD_RAY_EXIT_LOG_WAIT_S", DEFAULT_RAY_EXIT_LOG_WAIT_S,
    "At a script's exit, the longest wait for the local Ray's workers' last output to "
    "reach the console before Ray shuts down (Ray itself always waits 0.5 s).")

# The local instance without a dashboard still starts Ray's API server process (only its
# usage-stats module) and ray.init() waits for it to publish its address: about a second
# of every local start. The engine skips it; 1 starts it as Ray does.
RAY_API_SERVER_ENV_VAR = _setting(
    "TRAINYARD_RAY_API_SERVER", 0,
    "1 starts the local Ray's API server process as Ray does (without the dashboard it "
    "runs only Ray's usage-stats module); skipped by default, about a second per start.")

# Ray's autoscaler monitor (the process that reports tasks and actors that cannot be
# scheduled) costs about 0.7 CPU-s to start, as much as a worker; the local instance
# starts it this long after itself, so that a short step never pays for it.
DEFAULT_RAY_MONITOR_DELAY_S = 10.0
RAY_MONITOR_DELAY_ENV_VAR = _setting(
    "TRAINYARD_RAY_MONITOR_DELAY_S", DEFAULT_RAY_MONITOR_DELAY_S,
    "Seconds after the local Ray's start that its autoscaler monitor starts (it reports "
    "tasks that cannot be scheduled); 0 starts it with Ray, as Ray does.")

# The deferred monitor runs at this niceness: it lands while the workers train, and on a
# machine whose cores they fill its start (and its periodic reports) must not take CPU
# from them. Ray's own start (delay 0) leaves it at Ray's niceness.
RAY_MONITOR_NICENESS = 19

# Seconds to wait for the worker group's placement group before failing with advice.
DEFAULT_PLACEMENT_GROUP_TIMEOUT_S = 60.0
PLACEMENT_GROUP_TIMEOUT_ENV_VAR = _setting(
    "TRAINYARD_PLACEMENT_GROUP_TIMEOUT_S", DEFAULT_PLACEMENT_GROUP_TIMEOUT_S,
    "Seconds to wait for the worker group's resources before failing with advice.")

# How long one long-poll of a worker waits for a report before returning empty.
POLL_TIMEOUT_S = 0.5
# Once a poll has a report, it waits this long for more before answering, so that a
# loop reporting every few milliseconds costs one driver round trip per window instead
# of one per report (each round trip is about a millisecond of the worker's CPU).
REPORT_BATCH_WINDOW_S = 0.1

# "0" turns off the worker's gc.freeze() before train_func (see
# engine/_internal/worker_group/worker.py).
GC_FREEZE_ENV_VAR = _setting(
    "TRAINYARD_GC_FREEZE", "1",
    "0 stops workers freezing their start-up heap (gc.freeze) before train_func.")

# "0" keeps workers in the directory Ray started them in, instead of the trial's
# directory (Ray Tune's RAY_CHDIR_TO_TRIAL_DIR=0, which is honoured too).
CHDIR_TO_TRIAL_DIR_ENV_VAR = _setting(
    "TRAINYARD_CHDIR_TO_TRIAL_DIR", "1",
    "0 stops workers starting train_func in the run's (trial's) directory; "
    "RAY_CHDIR_TO_TRIAL_DIR=0 does the same.")
RAY_CHDIR_TO_TRIAL_DIR_ENV_VAR = "RAY_CHDIR_TO_TRIAL_DIR"

# Seconds a worker may take to answer a poll before it counts as unhealthy.
DEFAULT_HEALTH_CHECK_TIMEOUT_S = 60.0
HEALTH_CHECK_TIMEOUT_ENV_VAR = _setting(
    "TRAINYARD_HEALTH_CHECK_TIMEOUT_S", DEFAULT_HEALTH_CHECK_TIMEOUT_S,
    "Seconds a worker may take to answer a poll before it counts as unhealthy.")

# Seconds finished workers get to exit on their own before they are killed.
GRACEFUL_EXIT_TIMEOUT_S = 2.0

# Reports a worker may queue before report() blocks (back-pressure on a slow driver).
REPORT_QUEUE_MAX = 10_000

# Names inside a run directory and a checkpoint.
CHECKPOINT_DIR_PREFIX = "checkpoint_"
COMMIT_MARKER = ".trainyard_committed"
STAGING_DIR = ".staging"
RUN_STATE_FILE = "run_state.json"
RUN_STATE_VERSION = 1
DICT_CHECKPOINT_FILE = "dict_checkpoint.pkl"
MODEL_CARD_FILE = "model_card.json"
# Checkpoint.set_metadata() (Ray keeps it under the same name).
CHECKPOINT_METADATA_FILE = ".metadata.json"
# Where Trainer.fit() keeps the trainer for Trainer.restore(path).
TRAINER_STATE_FILE = "trainer.pkl"

# Driver-side loggers. result.json and progress.csv are written for every fit() unless
# this is set to 1 (callbacks passed in RunConfig(callbacks=...) still run).
DISABLE_DEFAULT_LOGGERS_ENV_VAR = _setting(
    "TRAINYARD_DISABLE_DEFAULT_LOGGERS", "0",
    "1 stops fit() writing result.json and progress.csv (RunConfig callbacks still run).")
RESULT_JSON_FILE = "result.json"
PROGRESS_CSV_FILE = "progress.csv"
PARAMS_JSON_FILE = "params.json"
# Object stores have no append: loggers keep their files in memory and write them whole
# at each checkpoint, at the end of a trial, and at most this often in between.
LOGGER_REMOTE_FLUSH_PERIOD_S = 60.0
# Where Result.plot() writes its PNG when no path is given (inside the run directory).
PLOT_FILE = "learning_curve.png"

# RunConfig(metrics_reduce={"loss": "mean"}): how a metric may be reduced across ranks.
METRICS_REDUCE_OPS = ("mean", "sum", "min", "max")

# The fields every report gets from the engine (the seed's result.metrics listing).
AUTOMATIC_FIELDS = (
    "training_iteration", "time_this_iter_s", "time_total_s", "timestamp", "date", "done",
    "hostname", "node_ip", "pid", "trial_id", "experiment_id", "experiment_tag", "config",
    "iterations_since_restore", "time_since_restore",
    # The seed's older listing has these too (timesteps_total and episodes_total, None
    # unless reported, are not listed: RLlib reports them itself).
    "_timestamp", "_time_this_iter_s", "_training_iteration", "timesteps_since_restore",
    "warmup_time",
)

# Batch prediction: rows per model call unless BatchPredictor.predict(batch_size=) says.
DEFAULT_PREDICT_BATCH_SIZE = 4096
# Batch prediction: the block size Ray Data aims for when BatchPredictor reads Parquet or
# CSV paths itself. Ray's default (128 MiB) packs a file's row groups into a few big
# blocks, and one block goes to one actor: small blocks keep every actor of the pool busy.
DEFAULT_PREDICT_READ_BLOCK_BYTES = 8 * 2 ** 20
PREDICT_READ_BLOCK_BYTES_ENV_VAR = _setting(
    "TRAINYARD_PREDICT_READ_BLOCK_BYTES", DEFAULT_PREDICT_READ_BLOCK_BYTES,
    "Block size (bytes) BatchPredictor asks Ray Data for when it reads Parquet or CSV "
    "paths.", default_text=f"`{DEFAULT_PREDICT_READ_BLOCK_BYTES}` (8 MiB)")

# RLlib (engine.rllib): RLlib imports TensorFlow whenever it is installed, which costs
# seconds per process. With a torch algorithm, the RLTrainer's worker process skips that
# import (RLlib's RLLIB_TEST_NO_TF_IMPORT switch, set in that process only) unless this
# is set to 0. RLlib's own env-runner processes are left as they are.
RLLIB_SKIP_TF_IMPORT_ENV_VAR = _setting(
    "TRAINYARD_RLLIB_SKIP_TF_IMPORT", "1",
    "0 lets an RLTrainer worker with a torch algorithm import TensorFlow as RLlib does.")


# --- storage (engine/_internal/storage/filesystem.py) ---------------------------------------------
# An object store that stalls (a network blip, a server restarting, throttling) must not
# fail a run that would go on a few seconds later: remote operations are retried with
# backoff while their error looks transient, for up to this many seconds.
DEFAULT_STORAGE_RETRY_S = 120.0
STORAGE_RETRY_ENV_VAR = _setting(
    "TRAINYARD_STORAGE_RETRY_S", DEFAULT_STORAGE_RETRY_S,
    "Seconds a remote storage operation is retried on transient errors (network, "
    "throttling, 5xx).")
MEMORY_STORAGE_ROOT_ENV_VAR = _setting(
    "TRAINYARD_MEMORY_STORAGE_ROOT", None,
    "The local directory behind memory:// storage (shared by the processes of a machine).",
    default_text="`/dev/shm/trainyard-memory`, else the temp directory")

# --- frameworks ---------------------------------------------------------------------------
# Hugging Face workers: relative paths (a TrainingArguments output_dir …) land in one
# directory per run on each node, shared by that node's ranks.
HF_SCRATCH_DIR_ENV_VAR = _setting(
    "TRAINYARD_HF_SCRATCH_DIR", None,
    "Where Hugging Face workers run, one directory per run: their relative paths land "
    "there.", default_text="the temp directory's `trainyard/`")
# Torch GPU workers: set by the engine in each worker (not by users), the index of the
# worker's own GPU among the CUDA_VISIBLE_DEVICES it sees.
OWN_GPU_INDEX_ENV_VAR = _setting(
    "TRAINYARD_OWN_GPU_INDEX", None,
    "Set by the engine in each torch GPU worker: its own GPU's index among "
    "CUDA_VISIBLE_DEVICES.", scope="internal")

# --- orchestration, build and tests (read outside engine/) --------------------------------
PIPELINES_ENV_VAR = _setting(
    "TRAINYARD_PIPELINES", None,
    "Pipelines on the path but not installed: name=module:attr,... (beside the "
    "trainyard.pipelines entry points).", scope="pipelines")
AIRFLOW_PIPELINES_ENV_VAR = _setting(
    "TRAINYARD_AIRFLOW_PIPELINES", "",
    "Comma-separated pipelines that get a retrain and a batch-predict Airflow DAG.",
    scope="Airflow", default_text="every pipeline found")
RETRAIN_SCHEDULE_ENV_VAR = _setting(
    "TRAINYARD_RETRAIN_SCHEDULE", "0 3 * * 1",
    "Cron schedule of the retrain Airflow DAGs (Mondays 03:00 UTC); none: triggered "
    "runs only.", scope="Airflow")
AIRFLOW_WEBHOOK_CONN_ENV_VAR = _setting(
    "TRAINYARD_AIRFLOW_WEBHOOK_CONN_ID", "trainyard_webhook",
    "The Airflow connection whose URL the DAGs' notifiers post failures and gate "
    "rejections to (no such connection: logged only).", scope="Airflow")
RUN_LEASE_S_ENV_VAR = _setting(
    "TRAINYARD_RUN_LEASE_S", 60.0,
    "Seconds a driver's ownership lease on a run lasts without renewal; another driver "
    "takes the run over only after it expires (RunInProgressError until then).")
ORCHESTRATOR_RUN_ID_ENV_VAR = _setting(
    "TRAINYARD_ORCHESTRATOR_RUN_ID", None,
    "The orchestrator run that started this driver, recorded as the run lease's owner "
    "(set by the ray_job mode; Airflow's and Prefect's own variables otherwise).",
    default_text="from Airflow/Prefect when set")
EXECUTION_ENV_VAR = _setting(
    "TRAINYARD_EXECUTION", "local",
    "How pipeline steps that start Ray work run: local (this process is the Ray driver) "
    "or ray_job (submitted to a Ray cluster's job server).", scope="pipelines")
RAY_JOB_ADDRESS_ENV_VAR = _setting(
    "TRAINYARD_RAY_JOB_ADDRESS", None,
    "The Ray job server (http://head:8265) of the ray_job mode.", scope="pipelines",
    default_text="$RAY_ADDRESS when it is http(s)://")
RAY_JOB_PYTHON_ENV_VAR = _setting(
    "TRAINYARD_RAY_JOB_PYTHON", "python",
    "The Python a ray_job step's entrypoint runs with on the cluster.", scope="pipelines")
RAY_JOB_POLL_S_ENV_VAR = _setting(
    "TRAINYARD_RAY_JOB_POLL_S", 1.0,
    "Seconds between polls of a Ray job's status and logs.", scope="pipelines")
DEFAULT_DATA_CACHE = os.path.join("~", ".cache", "trainyard", "data")
DATA_CACHE_ENV_VAR = _setting(
    "TRAINYARD_DATA_CACHE", DEFAULT_DATA_CACHE,
    "Where the bundled pipelines keep data they derive (digits' train/validation split), "
    "so that a training worker reads it with numpy instead of importing scikit-learn; "
    "empty: no cache.", scope="pipelines")
JOB_NAME_ENV_VAR = _setting(
    "TRAINYARD_JOB_NAME", None,
    "Set by the ray_job mode in the job's environment: the step's job directory name.",
    scope="pipelines", default_text="set by trainyard")
JOB_SUBMISSION_ID_ENV_VAR = _setting(
    "TRAINYARD_JOB_SUBMISSION_ID", None,
    "Set by the ray_job mode in the job's environment: its submission id.",
    scope="pipelines", default_text="set by trainyard")
RAY_CONN_ID_ENV_VAR = _setting(
    "TRAINYARD_RAY_CONN_ID", "trainyard_ray",
    "The Airflow connection that names the Ray job server.", scope="Airflow")
SQL_PASSWORD_ENV_VAR = _setting(
    "TRAINYARD_SQL_PASSWORD", None,
    "The database password ingest() fills into a SQL source URL that has none (never "
    "recorded in references, results or logs).", scope="pipelines")
REGISTRY_ENV_VAR = _setting(
    "TRAINYARD_REGISTRY", None,
    "Where promote() keeps model aliases: mlflow:<tracking URI> (an MLflow model "
    "registry), or a path/URI of pointer files.", scope="pipelines",
    default_text="pointer files under <storage>/models")
NOTIFY_WEBHOOK_ENV_VAR = _setting(
    "TRAINYARD_NOTIFY_WEBHOOK", None,
    "URL the Prefect flows POST a JSON message to when a flow run fails or a promotion "
    "is rejected (unset: no such messages; a webhook that is down is logged).",
    scope="Prefect")
PREFECT_SERVER_ENV_VAR = _setting(
    "TRAINYARD_PREFECT_SERVER", None,
    "background: python -m flows.retrain / flows.batch_predict start Prefect's background "
    "server (prefect server start --background) when none runs, and later runs reuse it "
    "(prefect server stop ends it); unset: a temporary server per run, unless "
    "PREFECT_API_URL is set or a background server runs.", scope="Prefect")
WHEEL_CACHE_ENV_VAR = _setting(
    "TRAINYARD_WHEEL_CACHE", "~/.cache/trainyard/wheels",
    "Where scripts/install_horovod.sh keeps the Horovod wheel it builds.", scope="build")
LOAD_FITS_ENV_VAR = _setting(
    "TRAINYARD_LOAD_FITS", 100,
    "fit() calls of tests/reliability/test_load.py (lower it for a quick local run).",
    scope="tests")
TEST_TIMELINE_ENV_VAR = _setting(
    "TRAINYARD_TEST_TIMELINE", None,
    "A file the test suite appends each test's start and end to (with the pid running it); "
    "scripts/cpu_by_process.py --by-test sets it to charge CPU to tests.", scope="tests")


# --- the settings table --------------------------------------------------------------------
def _shown_default(setting: Setting) -> str:
    if setting.default_text:
        return setting.default_text
    return "unset" if setting.default is None else f"`{setting.default}`"


def settings_table(settings: Optional[List[Setting]] = None) -> str:
    """The settings as a Markdown table (docs/guides/settings.md)."""
    rows = ["| Variable | Default | Read by | What it does |", "|---|---|---|---|"]
    for s in settings if settings is not None else SETTINGS.values():
        text = s.description.replace("|", "\\|")
        rows.append(f"| `{s.name}` | {_shown_default(s)} | {s.scope} | {text} |")
    return "\n".join(rows) + "\n"

