"""Ray Tune's ``ray.tune.logger`` names: the logger callbacks of ``engine.callbacks``.

``TBXLoggerCallback`` is :class:`engine.callbacks.TensorBoardLoggerCallback`
(tensorboardX, ``pip install 'trainyard[tracking]'``).
"""

from __future__ import annotations

from engine.callbacks import (CSVLoggerCallback, JsonLoggerCallback, LoggerCallback,
                              TensorBoardLoggerCallback)

TBXLoggerCallback = TensorBoardLoggerCallback

__all__ = ["LoggerCallback", "JsonLoggerCallback", "CSVLoggerCallback",
           "TBXLoggerCallback"]
