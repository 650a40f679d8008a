"""Ray Tune's integrations, at Ray's paths (``ray.tune.integration.*``):

- ``engine.tune.integration.xgboost`` / ``.lightgbm``: ``TuneReportCheckpointCallback``
  for ``xgboost.train`` / ``lightgbm.train`` inside a function trainable (trainyard's
  ``engine.xgboost.ReportCallback`` / ``engine.lightgbm.ReportCallback``, as in Ray);
- ``engine.tune.integration.ray_train``: ``TuneReportCallback``, which reports a
  trainer's results (run inside a Tune trial) to that trial: Train inside Tune.

Importing this package imports no framework.
"""
