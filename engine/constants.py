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
