"""``ray.tune.integration.lightgbm``: ``TuneReportCheckpointCallback`` is
``engine.lightgbm.ReportCallback`` (Ray's ``RayTrainReportCallback``): pass it to
``lightgbm.train(..., callbacks=[...])`` in a function trainable to report each round's
evaluation metrics to the trial, and checkpoint the booster every ``frequency`` rounds
and at the end. Importing it imports lightgbm."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "TuneReportCheckpointCallback":
        from engine.lightgbm import RayTrainReportCallback

        return RayTrainReportCallback
    if name == "TuneReportCallback":
        raise AttributeError(
            "ray.tune.integration.lightgbm.TuneReportCallback was removed from Ray (2.11): "
            "use TuneReportCheckpointCallback (frequency=0, checkpoint_at_end=False "
            "reports without checkpoints).")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TuneReportCheckpointCallback"]
