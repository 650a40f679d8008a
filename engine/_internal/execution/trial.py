"""Trial: how callbacks see one run (a plain ``fit()`` is a single trial; a Tuner has many).

The Tuner creates one ``Trial`` per sampled config and calls the ``on_trial_*`` hooks
of ``engine.callbacks.Callback`` with it; the controller presents a plain ``fit()`` the
same way, so a ``LoggerCallback`` works unchanged in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

PENDING = "PENDING"
RUNNING = "RUNNING"
TERMINATED = "TERMINATED"
ERROR = "ERROR"


@dataclass(eq=False)
class Trial:
    """One run as callbacks see it.

    Attributes:
        trial_id: Unique id (``"a1b2c_00000"``), also in every result as ``trial_id``.
        trial_name: Human-readable name; ``str(trial)`` gives it.
        config: The run's config (``train_loop_config``, or the Tuner's sampled one).
        path: The trial's directory (local path or URI, e.g. ``s3://bucket/run``); the
            built-in loggers write their files here.
        last_result: The latest result (rank 0's metrics with the automatic fields);
            updated before ``on_trial_result`` is called.
        status: ``PENDING``, ``RUNNING``, ``TERMINATED`` or ``ERROR``.
        evaluated_params: The hyperparameters a Tuner sampled (flat dict), logged as
            TensorBoard hparams; None means "use the flattened ``config``".
        experiment_tag: The Tuner's tag for the trial (``"0_lr=0.1"``); ``"0"`` in fit().
        checkpoint: The latest committed checkpoint, or None.
        error: The exception that ended the trial, or None.
        storage: The ``Storage`` of ``path`` when the engine already has one open
            (keeps an S3 endpoint); loggers fall back to opening ``path``.
    """

    trial_id: str
    trial_name: str
    config: Dict[str, Any] = field(default_factory=dict)
    path: str = ""
    last_result: Dict[str, Any] = field(default_factory=dict)
    status: str = PENDING
    evaluated_params: Optional[Dict[str, Any]] = None
    experiment_tag: str = "0"
    checkpoint: Any = None
    error: Optional[BaseException] = None
    storage: Any = field(default=None, repr=False)

    @property
    def local_path(self) -> str:
        """The trial directory (Ray's name for it)."""
        return self.path

    @property
    def logdir(self) -> str:
        """Alias of :attr:`path` (older Ray spelling)."""
        return self.path

    def get_storage(self):
        """The ``Storage`` rooted at the trial directory (opened from ``path`` if unset)."""
        if self.storage is None:
            from engine._internal.storage.filesystem import Storage

            self.storage = Storage.from_path(self.path)
        return self.storage

    def __str__(self) -> str:
        return self.trial_name
