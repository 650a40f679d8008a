"""``ray.tune.integration.xgboost``: ``TuneReportCheckpointCallback`` is
``engine.xgboost.ReportCallback`` (Ray's ``RayTrainReportCallback``): pass it to
``xgboost.train(..., callbacks=[...])`` in a function trainable to report each round's
evaluation metrics to the trial, and checkpoint the booster every ``frequency`` rounds
and at the end. Importing it imports xgboost."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "TuneReportCheckpointCallback":
        from engine.xgboost import RayTrainReportCallback

        return RayTrainReportCallback
    if name == "TuneReportCallback":
        raise AttributeError(
            "ray.tune.integration.xgboost.TuneReportCallback was removed from Ray (2.11): "
            "use TuneReportCheckpointCallback (frequency=0, checkpoint_at_end=False "
            "reports without checkpoints).")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TuneReportCheckpointCallback"]
