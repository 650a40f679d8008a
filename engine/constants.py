"""Knobs of the engine: environment variables and their defaults, in one place.

Every ``TRAINYARD_*`` environment variable that trainyard reads (the engine, the
pipeline steps and the orchestrator packages) is declared here with :func:`_setting`,
which records its type, default and a one-line description in :data:`SETTINGS`, and is
read with :func:`get`, which parses and checks every setting the same way: unset (or,
but for text, blank) is the default; a value that does not parse is one
:class:`~engine.exceptions.SettingError` that names the variable, what it takes and an
example. The docs' settings page (docs/guides/settings.md) has its table generated from
the declarations::

    python scripts/gen_settings_table.py             # rewrite the table on that page
    python scripts/gen_settings_table.py --markdown  # print it

The test suite's and the build scripts' own variables are declared where they are read
(``tests/README.md``, ``scripts/install_horovod.sh``); ``tests/unit/engine/test_settings.py``
checks that no other ``TRAINYARD_*`` name is used anywhere.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from engine.exceptions import SettingError

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, type, default and what it does.

    Args:
        name: The variable (``TRAINYARD_…``).
        default: The value used when it is unset (None: no value, or a computed one).
        description: One line: what it changes, for the settings page's table.
        scope: Who reads it: ``engine``, ``internal`` (set by trainyard for its own
            processes), ``pipelines``, ``Prefect`` or ``Airflow``.
        default_text: How the table shows a default that is computed or needs words
            (e.g. ``"max(4, CPU count)"``); empty: the default value itself.
        kind: ``str`` (the text as set, stripped; blank is a value), ``int``, ``float``,
            ``bool`` (1/true/yes/on or 0/false/no/off) or ``choice`` (one of
            ``choices``, any case).
        minimum: The smallest number allowed (``int`` and ``float``).
        positive: Numbers must be above 0 (a timeout, a lease).
        maximum: The largest number allowed.
        choices: The values a ``choice`` takes.
    """

    name: str
    default: Any
    description: str
    scope: str = "engine"
    default_text: str = ""
    kind: str = "str"
    minimum: Optional[float] = None
    positive: bool = False
    maximum: Optional[float] = None
    choices: Tuple[str, ...] = ()

    def get(self) -> Any:
        """The value in the environment now, parsed; the default when unset."""
        raw = os.environ.get(self.name)
        if raw is None:
            return self.default
        return self.parse(raw)

    def parse(self, raw: str) -> Any:
        """``raw`` as this setting's type; SettingError naming the variable if it is not
        one."""
        text = raw.strip()
        if self.kind == "str":
            return text
        if not text:
            return self.default
        if self.kind == "bool":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise self._bad(raw)
        if self.kind == "choice":
            if text.lower() in self.choices:
                return text.lower()
            raise self._bad(raw)
        try:
            value = int(text) if self.kind == "int" else float(text)
        except ValueError:
            raise self._bad(raw) from None
        if isinstance(value, float) and not math.isfinite(value):
            raise self._bad(raw)
        if (self.positive and not value > 0) \
                or (self.minimum is not None and value < self.minimum) \
                or (self.maximum is not None and value > self.maximum):
            raise self._bad(raw)
        return value

    def expected(self) -> str:
        """What the variable takes, in words."""
        if self.kind == "bool":
            return "1 or 0 (true/false, yes/no, on/off)"
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "str":
            return "text"
        what = "a whole number" if self.kind == "int" else "a number"
        bounds = []
        if self.positive:
            bounds.append("> 0")
        if self.minimum is not None:
            bounds.append(f">= {self.minimum:g}")
        if self.maximum is not None:
            bounds.append(f"<= {self.maximum:g}")
        return f"{what} {' and '.join(bounds)}" if bounds else what

    def _bad(self, raw: str) -> SettingError:
        default = self.default_text or ("unset" if self.default is None
                                        else repr(self.default))
        return SettingError(
            f"{self.name}={raw!r} is not valid: it takes {self.expected()}. Set it to "
            f"e.g. {self.name}={_example(self)}, or unset it for the default ({default}).",
            name=self.name, value=raw)


def _example(setting: Setting) -> str:
    if setting.default is not None and setting.kind != "bool":
        return str(setting.default)
    if setting.kind == "bool":
        return "0" if setting.default else "1"
    if setting.kind == "choice":
        return setting.choices[0]
    if setting.kind in ("int", "float"):
        low = setting.minimum if setting.minimum is not None else 1
        return f"{max(low, 1):g}"
    return "..."


#: Every setting, by name, in the order declared here (the settings table's order).
SETTINGS: Dict[str, Setting] = {}


def _setting(name: str, default: Any, description: str, scope: str = "engine",
             default_text: str = "", **kind: Any) -> str:
    """Declare ``name`` in :data:`SETTINGS` (``kind``: Setting's ``kind``, ``minimum``,
    ``positive``, ``maximum``, ``choices``); returns the name (for ``*_ENV_VAR``)."""
    if not name.startswith("TRAINYARD_") or name in SETTINGS:
        raise ValueError(f"setting {name!r}: a new TRAINYARD_* name")
    setting = Setting(name, default, description, scope, default_text, **kind)
    if default is not None and setting.kind != "str":
        setting.parse(str(int(default) if isinstance(default, bool) else default))
    SETTINGS[name] = setting
    return name


def get(name: str) -> Any:
    """The value of setting ``name`` (a ``*_ENV_VAR`` of this module) in the environment
    now: parsed to its type and checked, the default when unset.

    Raises:
        SettingError: the variable is set to a value its setting does not take.
        KeyError: ``name`` is not a declared setting.
    """
    return _declared(name).get()


def given(name: str) -> Any:
    """Setting ``name`` parsed as :func:`get` does, but None when the variable is unset
    or blank instead of its default: for code that asks whether a value was set."""
    setting, raw = _declared(name), os.environ.get(name, "")
    return setting.parse(raw) if raw.strip() else None


def _declared(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a trainyard setting: declare it in "
                       "engine/constants.py with _setting()") from None


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
    "cluster instead).", default_text=f"max({DEFAULT_MIN_RAY_NUM_CPUS}, CPU count)",
    kind="int", minimum=1)

# Ray starts worker processes at nice 15 so that its daemons stay responsive; the local
# instance's workers are its main job and run at the priority torchrun's would have.
# Kept as a setting: on a machine shared with other work a user makes training yield.
DEFAULT_RAY_WORKER_NICENESS = 0
RAY_WORKER_NICENESS_ENV_VAR = _setting(
    "TRAINYARD_RAY_WORKER_NICENESS", DEFAULT_RAY_WORKER_NICENESS,
    "Niceness of the local Ray's worker processes (Ray's own default is 15): raise it "
    "to let other work on the machine go first.", kind="int", minimum=-20, maximum=19)

# At a script's exit Ray sleeps half a second so that the workers' last output reaches
# the console; the engine shuts its local instance down as soon as that output is
# streamed, waiting at most this long. Kept as a setting: on a loaded machine Ray's log
# monitor can take longer than that, and a longer bound loses none of the last lines.
DEFAULT_RAY_EXIT_LOG_WAIT_S = 0.5
RAY_EXIT_LOG_WAIT_ENV_VAR = _setting(
    "TRAINYARD_RAY_EXIT_LOG_WAIT_S", DEFAULT_RAY_EXIT_LOG_WAIT_S,
    "At a script's exit, the longest wait for the local Ray's workers' last output to "
    "reach the console before Ray shuts down (Ray itself always waits 0.5 s).",
    kind="float", minimum=0)

# Ray's autoscaler monitor (the process that reports tasks and actors that cannot be
# scheduled) costs about 0.7 CPU-s to start, as much as a worker; the local instance
# starts it this long after itself, so that a short step never pays for it. Kept as a
# setting: its reports of work that cannot be scheduled are a user's first clue why a
# run waits, and 0 gives them from the start.
DEFAULT_RAY_MONITOR_DELAY_S = 10.0
RAY_MONITOR_DELAY_ENV_VAR = _setting(
    "TRAINYARD_RAY_MONITOR_DELAY_S", DEFAULT_RAY_MONITOR_DELAY_S,
    "Seconds after the local Ray's start that its autoscaler monitor starts (it reports "
    "tasks that cannot be scheduled); 0 starts it with Ray, as Ray does.",
    kind="float", minimum=0)

# The deferred monitor runs at this niceness: it lands while the workers train, and on a
# machine whose cores they fill its start (and its periodic reports) must not take CPU
# from them. Ray's own start (delay 0) leaves it at Ray's niceness.
RAY_MONITOR_NICENESS = 19

# Seconds to wait for the worker group's placement group before failing with advice.
DEFAULT_PLACEMENT_GROUP_TIMEOUT_S = 60.0
PLACEMENT_GROUP_TIMEOUT_ENV_VAR = _setting(
    "TRAINYARD_PLACEMENT_GROUP_TIMEOUT_S", DEFAULT_PLACEMENT_GROUP_TIMEOUT_S,
    "Seconds to wait for the worker group's resources before failing with advice.",
    kind="float", positive=True)

# How long one long-poll of a worker waits for a report before returning empty.
POLL_TIMEOUT_S = 0.5
# Once a poll has a report, it waits this long for more before answering, so that a
# loop reporting every few milliseconds costs one driver round trip per window instead
# of one per report (each round trip is about a millisecond of the worker's CPU).
REPORT_BATCH_WINDOW_S = 0.1

# "0" keeps workers in the directory Ray started them in, instead of the trial's
# directory (Ray Tune's RAY_CHDIR_TO_TRIAL_DIR=0, which is honoured too): Ray's users
# have it, for code that reads files relative to where the script started.
CHDIR_TO_TRIAL_DIR_ENV_VAR = _setting(
    "TRAINYARD_CHDIR_TO_TRIAL_DIR", True,
    "0 stops workers starting train_func in the run's (trial's) directory; "
    "RAY_CHDIR_TO_TRIAL_DIR=0 does the same.", kind="bool")
RAY_CHDIR_TO_TRIAL_DIR_ENV_VAR = "RAY_CHDIR_TO_TRIAL_DIR"

# Seconds a worker may take to answer a poll before it counts as unhealthy.
DEFAULT_HEALTH_CHECK_TIMEOUT_S = 60.0
HEALTH_CHECK_TIMEOUT_ENV_VAR = _setting(
    "TRAINYARD_HEALTH_CHECK_TIMEOUT_S", DEFAULT_HEALTH_CHECK_TIMEOUT_S,
    "Seconds a worker may take to answer a poll before it counts as unhealthy.",
    kind="float", positive=True)

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
# this is set to 1 (callbacks passed in RunConfig(callbacks=...) still run): Ray Tune's
# TUNE_DISABLE_AUTO_CALLBACK_LOGGERS, for runs whose callbacks write their own files.
DISABLE_DEFAULT_LOGGERS_ENV_VAR = _setting(
    "TRAINYARD_DISABLE_DEFAULT_LOGGERS", False,
    "1 stops fit() writing result.json and progress.csv (RunConfig callbacks still run).",
    kind="bool")
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
    "paths.", default_text=f"`{DEFAULT_PREDICT_READ_BLOCK_BYTES}` (8 MiB)",
    kind="int", minimum=1)

# --- storage (engine/_internal/storage/filesystem.py) ---------------------------------------------
# An object store that stalls (a network blip, a server restarting, throttling) must not
# fail a run that would go on a few seconds later: remote operations are retried with
# backoff while their error looks transient, for up to this many seconds.
DEFAULT_STORAGE_RETRY_S = 120.0
STORAGE_RETRY_ENV_VAR = _setting(
    "TRAINYARD_STORAGE_RETRY_S", DEFAULT_STORAGE_RETRY_S,
    "Seconds a remote storage operation is retried on transient errors (network, "
    "throttling, 5xx).", kind="float", minimum=0)
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
    "CUDA_VISIBLE_DEVICES.", scope="internal", kind="int", minimum=0)

# --- pipelines and orchestration (read outside engine/) ---------------------------------
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
    "takes the run over only after it expires (RunInProgressError until then).",
    kind="float", positive=True)
ORCHESTRATOR_RUN_ID_ENV_VAR = _setting(
    "TRAINYARD_ORCHESTRATOR_RUN_ID", None,
    "The orchestrator run that started this driver, recorded as the run lease's owner "
    "(set by the ray_job mode; Airflow's and Prefect's own variables otherwise).",
    default_text="from Airflow/Prefect when set")
EXECUTION_ENV_VAR = _setting(
    "TRAINYARD_EXECUTION", "local",
    "How pipeline steps that start Ray work run: local (this process is the Ray driver) "
    "or ray_job (submitted to a Ray cluster's job server).", scope="pipelines",
    kind="choice", choices=("local", "ray_job"))
RAY_JOB_ADDRESS_ENV_VAR = _setting(
    "TRAINYARD_RAY_JOB_ADDRESS", None,
    "The Ray job server (http://head:8265) of the ray_job mode.", scope="pipelines",
    default_text="$RAY_ADDRESS when it is http(s)://")
RAY_JOB_PYTHON_ENV_VAR = _setting(
    "TRAINYARD_RAY_JOB_PYTHON", "python",
    "The Python a ray_job step's entrypoint runs with on the cluster.", scope="pipelines")
RAY_JOB_POLL_S_ENV_VAR = _setting(
    "TRAINYARD_RAY_JOB_POLL_S", 1.0,
    "Seconds between polls of a Ray job's status and logs.", scope="pipelines",
    kind="float", minimum=0.05)
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
    "The Airflow connection that names the Ray job server (its password: the cluster's "
    "token).", scope="Airflow")
PREFECT_RAY_TOKEN_BLOCK_ENV_VAR = _setting(
    "TRAINYARD_PREFECT_RAY_TOKEN_BLOCK", None,
    "The Prefect Secret block that holds the Ray cluster's token for ray_job steps.",
    scope="Prefect", default_text="Ray's own token sources")
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
    "(prefect server stop ends it); temporary or unset: a temporary server per run, unless "
    "PREFECT_API_URL is set or a background server runs.", scope="Prefect",
    kind="choice", choices=("background", "temporary"))


# --- the settings table --------------------------------------------------------------------
def _shown_default(setting: Setting) -> str:
    if setting.default_text:
        return setting.default_text
    return "unset" if setting.default is None else f"`{setting.default}`"


def settings_table(settings: Optional[List[Setting]] = None) -> str:
    """The settings as a Markdown table (docs/guides/settings.md)."""
    rows = ["| Variable | Takes | Default | Read by | What it does |", "|---|---|---|---|---|"]
    for s in settings if settings is not None else SETTINGS.values():
        text = s.description.replace("|", "\\|")
        rows.append(f"| `{s.name}` | {s.expected()} | {_shown_default(s)} | {s.scope} "
                    f"| {text} |")
    return "\n".join(rows) + "\n"

