"""Data to and from the workers: the trainer's ``datasets=`` to per-worker shards
(``datasets``, via Ray Data), when to materialize them first (``plan``), local Parquet
shards a worker reads itself (``parquet_shards``), and for prediction the batch
conversions (``batches``) and ``BatchPredictor`` (``batch_predictor``, Ray Data's
``map_batches``). Prediction's batches are here, not in a package of their own: they are
the same question (what a dataset becomes on its way to a model) on the scoring side.
"""
