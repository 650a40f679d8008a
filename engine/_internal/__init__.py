"""The engine's internals, grouped by concern (nothing outside ``engine/`` imports them).

- ``execution``: the driver side of one run (the controller and what it decides with).
- ``worker_group``: the worker actors and what runs inside their processes.
- ``checkpoint``: numbering, retention and the storage I/O of a run's checkpoints.
- ``run_state``: what describes and records a run (spec, record, lease, timeline).
- ``storage``: the one place that talks to storage, and safe-to-show URIs.
- ``data``: datasets to worker shards, and batches for prediction.
- ``ray_runtime``: starting, joining and stopping Ray, and every touch of Ray's private API.
- ``gbdt``: the shared loop of the tree trainers (xgboost, lightgbm).

``metrics.py`` (``engine.evaluate``) and ``plotting.py`` (``Result.plot``) stay here: they
serve the public result API, not a run, and belong to none of the concerns above.
"""
