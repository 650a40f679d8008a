"""A run's checkpoints: ``manager`` decides (numbering, retention; no I/O), ``committer``
does the storage I/O in an order a driver killed at any point survives."""
