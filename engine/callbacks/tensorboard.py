"""TensorBoard event files in each trial directory (written with tensorboardX)."""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from typing import Any, Dict, Optional

from engine import constants
from engine._internal.execution.trial import Trial
from engine.callbacks.base import LoggerCallback
from engine.callbacks.files import flatten, iteration_of

# Automatic fields that are numbers but not curves worth drawing.
_NOT_SCALARS = ("pid", "timestamp", "training_iteration", "done")
_HPARAM_TYPES = (int, float, str, bool)


def numeric_scalars(result: Dict[str, Any]) -> Dict[str, float]:
    """The result's numeric values (nested dicts flattened with '/'), bools and the
    automatic fields that are not curves left out."""
    out = {}
    for key, value in flatten(result, skip=("config",) + _NOT_SCALARS).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    return out


class _TrialWriter:
    def __init__(self, trial: Trial) -> None:
        from tensorboardX import SummaryWriter

        self.storage = trial.get_storage()
        # Object stores: write locally, upload the event files whole (no append there).
        self.local_dir = None if self.storage.local else tempfile.mkdtemp(prefix="trainyard_tb_")
        if self.storage.local:
            self.storage.makedirs(self.storage.root)
        self.writer = SummaryWriter(logdir=self.local_dir or self.storage.root, flush_secs=30)
        self._last_upload = time.monotonic()

    def sync(self, force: bool = False) -> None:
        self.writer.flush()
        if self.local_dir is None:
            return
        due = time.monotonic() - self._last_upload > constants.LOGGER_REMOTE_FLUSH_PERIOD_S
        if force or due:
            self.storage.upload_dir(self.local_dir, self.storage.root)
            self._last_upload = time.monotonic()

    def close(self) -> None:
        self.writer.close()
        self.sync(force=True)
        if self.local_dir is not None:
            shutil.rmtree(self.local_dir, ignore_errors=True)


class TensorBoardLoggerCallback(LoggerCallback):
    """Writes TensorBoard event files (tensorboardX) into each trial directory.

    Every numeric metric is a scalar curve over ``training_iteration``, nested dicts
    flattened with '/' (``{"val": {"loss": 1}}`` → ``val/loss``). When a trial ends,
    its hyperparameters (``trial.evaluated_params`` for Tuner trials, else the flattened
    config) and last metrics are logged as hparams, so TensorBoard's HParams tab
    compares the trials of a Tuner. View with ``tensorboard --logdir <run dir>``.

    Needs ``tensorboardX`` (``pip install 'trainyard[tracking]'``).
    """

    def __init__(self) -> None:
        try:
            import tensorboardX  # noqa: F401
        except ImportError as exc:
            raise ImportError("TensorBoardLoggerCallback needs tensorboardX: "
                              "pip install 'trainyard[tracking]'") from exc
        self._writers: Dict[str, _TrialWriter] = {}

    def log_trial_start(self, trial: Trial) -> None:
        self._writer(trial)

    def log_trial_result(self, iteration: int, trial: Trial, result: Dict[str, Any]) -> None:
        tw = self._writer(trial)
        step = iteration_of(result)
        step = iteration if step is None else step
        for key, value in numeric_scalars(result).items():
            tw.writer.add_scalar(key, value, global_step=step)
        tw.sync()

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        tw = self._writers.pop(trial.trial_id, None)
        if tw is None:
            return
        params = _hparams(trial)
        if params:
            from tensorboardX.summary import hparams

            metrics = {k: v for k, v in numeric_scalars(trial.last_result or {}).items()
                       if not math.isnan(v)}
            writer = tw.writer._get_file_writer()
            for summary in hparams(params, metrics):
                writer.add_summary(summary)
        tw.close()

    def on_checkpoint(self, checkpoint: Any, metrics: Dict[str, Any]) -> None:
        for tw in self._writers.values():
            tw.sync(force=True)

    def _writer(self, trial: Trial) -> _TrialWriter:
        tw = self._writers.get(trial.trial_id)
        if tw is None:
            tw = self._writers[trial.trial_id] = _TrialWriter(trial)
        return tw


def _hparams(trial: Trial) -> Optional[Dict[str, Any]]:
    params = trial.evaluated_params
    if params is None:
        params = flatten(trial.config or {}, skip=())
    return {k: (v if isinstance(v, _HPARAM_TYPES) else str(v)) for k, v in params.items()}
