"""Knobs of the engine: environment variables and their defaults, in one place."""

from __future__ import annotations

import os

# Where runs are stored when RunConfig(storage_path=None).
STORAGE_PATH_ENV_VAR = "TRAINYARD_STORAGE_PATH"
DEFAULT_STORAGE_PATH = os.path.join("~", "trainyard_results")

# Logical CPUs given to the embedded Ray when none is running. Ray's CPU counts are
# logical: on a 2-core laptop two 1-CPU workers would otherwise leave nothing for Ray
# Data tasks, which then wait forever.
RAY_NUM_CPUS_ENV_VAR = "TRAINYARD_RAY_NUM_CPUS"
DEFAULT_MIN_RAY_NUM_CPUS = 4

# Seconds to wait for the worker group's placement group before failing with advice.
PLACEMENT_GROUP_TIMEOUT_ENV_VAR = "TRAINYARD_PLACEMENT_GROUP_TIMEOUT_S"
DEFAULT_PLACEMENT_GROUP_TIMEOUT_S = 60.0

# How long one long-poll of a worker waits for a report before returning empty.
POLL_TIMEOUT_S = 0.5
# Once a poll has a report, it waits this long for more before answering, so that a
# loop reporting every few milliseconds costs one driver round trip per window instead
# of one per report (each round trip is about a millisecond of the worker's CPU).
REPORT_BATCH_WINDOW_S = 0.1

# "0" turns off the worker's gc.freeze() before train_func (see engine/_internal/worker.py).
GC_FREEZE_ENV_VAR = "TRAINYARD_GC_FREEZE"

# Seconds a worker may take to answer a poll before it counts as unhealthy.
HEALTH_CHECK_TIMEOUT_ENV_VAR = "TRAINYARD_HEALTH_CHECK_TIMEOUT_S"
DEFAULT_HEALTH_CHECK_TIMEOUT_S = 60.0

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

# Driver-side loggers. result.json and progress.csv are written for every fit() unless
# this is set to 1 (callbacks passed in RunConfig(callbacks=...) still run).
DISABLE_DEFAULT_LOGGERS_ENV_VAR = "TRAINYARD_DISABLE_DEFAULT_LOGGERS"
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
)

# Batch prediction: rows per model call unless BatchPredictor.predict(batch_size=) says.
DEFAULT_PREDICT_BATCH_SIZE = 4096
# Batch prediction: the block size Ray Data aims for when BatchPredictor reads Parquet or
# CSV paths itself. Ray's default (128 MiB) packs a file's row groups into a few big
# blocks, and one block goes to one actor: small blocks keep every actor of the pool busy.
PREDICT_READ_BLOCK_BYTES_ENV_VAR = "TRAINYARD_PREDICT_READ_BLOCK_BYTES"
DEFAULT_PREDICT_READ_BLOCK_BYTES = 8 * 2 ** 20

# RLlib (engine.rllib): RLlib imports TensorFlow whenever it is installed, which costs
# seconds per process. With a torch algorithm, the RLTrainer's worker process skips that
# import (RLlib's RLLIB_TEST_NO_TF_IMPORT switch, set in that process only) unless this
# is set to 0. RLlib's own env-runner processes are left as they are.
RLLIB_SKIP_TF_IMPORT_ENV_VAR = "TRAINYARD_RLLIB_SKIP_TF_IMPORT"
