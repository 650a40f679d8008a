"""The engine's exceptions: one root, specific subclasses, messages that say what to do."""

from __future__ import annotations

from typing import Any, Optional


class TrainyardError(Exception):
    """Root of every error the engine raises on purpose."""


class ConfigError(TrainyardError, ValueError):
    """A config object was given a value it cannot work with."""


class SettingError(ConfigError):
    """A ``TRAINYARD_*`` environment variable is set to a value it does not take
    (``engine.constants.get``); the message names the variable and an example."""

    def __init__(self, message: str, name: str = "", value: str = "") -> None:
        super().__init__(message)
        self.name, self.value = name, value


class StorageError(TrainyardError):
    """Storage for checkpoints and run records cannot be used."""


class CheckpointError(TrainyardError):
    """A checkpoint could not be written, committed or read."""


class WorkerGroupStartupError(TrainyardError):
    """The worker group could not be started (resources, placement, backend setup)."""


class WorkerError(TrainyardError):
    """A worker raised or died. Pickles across actors (plain args only).

    The engine raises one of its typed subclasses (``WorkerDiedError``,
    ``WorkerHealthCheckError``, ``CollectiveTimeoutError``, ``UserCodeError``); retry
    decisions are made on those types. ``rank`` is -1 when no single rank is to blame;
    ``node`` is the address of the rank's node, when known.
    """

    def __init__(self, rank: int, message: str, traceback_str: str = "",
                 node: str = "") -> None:
        super().__init__(rank, message, traceback_str, node)
        self.rank = rank
        self.message = message
        self.traceback_str = traceback_str
        self.node = node

    def __str__(self) -> str:
        text = f"Worker rank {self.rank} failed: {self.message}"
        if self.traceback_str:
            text += f"\n\nRemote traceback (rank {self.rank}):\n{self.traceback_str}"
        return text


class WorkerDiedError(WorkerError):
    """A worker's process is gone: killed (SIGKILL, the OOM killer) or crashed."""


class WorkerHealthCheckError(WorkerError):
    """No worker answered the driver within ``TRAINYARD_HEALTH_CHECK_TIMEOUT_S`` (a
    process hung in C code holding the GIL, or a lost node)."""


class CollectiveTimeoutError(WorkerError):
    """The group is stuck in a collective: one ran past the backend's timeout, or no
    rank reported for the backend's ``timeout_s`` (the stall watchdog)."""


class UserCodeError(WorkerError):
    """``train_func`` raised on a worker; ``traceback_str`` is the remote traceback."""


class TrainingFailedError(TrainyardError):
    """Training failed and retries are exhausted; ``.result`` holds the partial Result."""

    def __init__(self, message: str, result: Optional[Any] = None) -> None:
        super().__init__(message)
        self.result = result

    def __reduce__(self):  # keep `.result` when pickled across processes
        return (type(self), (self.args[0], self.result))


class MissingColumnsError(ConfigError):
    """A dataset or batch lacks columns that a model (its model card, preprocessor or
    the arguments given) needs. ``.missing`` lists them."""

    def __init__(self, message: str, missing: Optional[list] = None) -> None:
        super().__init__(message)
        self.missing = list(missing or [])

    def __reduce__(self):  # crosses actors: keep `.missing`
        return (type(self), (self.args[0], self.missing))


class FrameworkMismatchError(CheckpointError):
    """A checkpoint written by one framework's trainer was given to another framework's
    predictor. ``.checkpoint_framework`` and ``.predictor_framework`` name both."""

    def __init__(self, message: str, checkpoint_framework: Optional[str] = None,
                 predictor_framework: Optional[str] = None) -> None:
        super().__init__(message)
        self.checkpoint_framework = checkpoint_framework
        self.predictor_framework = predictor_framework

    def __reduce__(self):
        return (type(self), (self.args[0], self.checkpoint_framework,
                             self.predictor_framework))


class RunInProgressError(TrainyardError):
    """Another driver holds the run's lease (one owner per run). ``.owner`` (host, pid,
    orchestrator run id …) and ``.expires_at`` (Unix time) say who and until when; the
    storage was not changed."""

    def __init__(self, message: str, owner: Optional[dict] = None,
                 expires_at: Optional[float] = None, run_name: Optional[str] = None) -> None:
        super().__init__(message)
        self.owner = dict(owner or {})
        self.expires_at = expires_at
        self.run_name = run_name

    def __reduce__(self):  # crosses processes (Ray, orchestrator results): keep the fields
        return (type(self), (self.args[0], self.owner, self.expires_at, self.run_name))


class RunOwnershipLostError(TrainyardError):
    """This driver lost the run's lease to another driver (it stalled or was cut off
    from storage for longer than the lease), so it stopped before writing anything more
    to the run: no checkpoint, no run record. ``.owner`` (host, pid, orchestrator run id
    …) names the driver that owns the run now, when it could be read. Not retried: the
    run goes on under its new owner."""

    def __init__(self, message: str, owner: Optional[dict] = None,
                 run_name: Optional[str] = None) -> None:
        super().__init__(message)
        self.owner = dict(owner or {})
        self.run_name = run_name

    def __reduce__(self):  # crosses processes (Ray, orchestrator results): keep the fields
        return (type(self), (self.args[0], self.owner, self.run_name))


class RunConfigMismatchError(ConfigError):
    """``fit()`` named an existing run (``RunConfig(name=...)``) but gives it another
    training config, scaling or datasets than the run was trained with: refused before
    anything ran or was written. ``.differences`` lists them (``key: stored X, given
    Y``). Use a new run name, or ``Trainer.restore(path)`` to go on with the stored
    run."""

    def __init__(self, message: str, differences: Optional[list] = None,
                 run_name: Optional[str] = None) -> None:
        super().__init__(message)
        self.differences = list(differences or [])
        self.run_name = run_name

    def __reduce__(self):  # crosses processes (Ray, orchestrator results): keep the fields
        return (type(self), (self.args[0], self.differences, self.run_name))
