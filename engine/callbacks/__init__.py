"""Driver-side callbacks: hooks with no-op defaults, fed by the controller and the Tuner.

    from engine.callbacks import LoggerCallback

    class LoggingCallback(LoggerCallback):
        def __init__(self):
            self.results = []

        def log_trial_result(self, iteration, trial, result):
            self.results.append(trial.last_result)

A plain ``fit()`` is presented as a single trial (``on_trial_start`` … ``on_trial_complete``
around its reports), so the same callback works with ``Tuner.fit()``. A callback that
raises is logged once with its traceback and disabled; training goes on and
``Result.callback_errors`` lists it.

Built-ins: :class:`JsonLoggerCallback` (``result.json``) and :class:`CSVLoggerCallback`
(``progress.csv``) run on every ``fit()`` unless ``TRAINYARD_DISABLE_DEFAULT_LOGGERS=1``;
:class:`TensorBoardLoggerCallback` and :class:`MLflowLoggerCallback` are added through
``RunConfig(callbacks=[...])`` (``pip install 'trainyard[tracking]'``). Each lives in a
module named after what it writes to: ``files`` (JSON, CSV), ``tensorboard``, ``mlflow``;
tensorboardX and MLflow are imported only when such a callback starts logging.
"""

from __future__ import annotations

from engine._internal.execution.trial import Trial
from engine.callbacks.base import Callback, LoggerCallback
from engine.callbacks.files import CSVLoggerCallback, JsonLoggerCallback
from engine.callbacks.mlflow import MLflowLoggerCallback
from engine.callbacks.tensorboard import TensorBoardLoggerCallback

__all__ = ["Callback", "LoggerCallback", "Trial", "JsonLoggerCallback", "CSVLoggerCallback",
           "TensorBoardLoggerCallback", "MLflowLoggerCallback"]
