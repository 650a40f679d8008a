"""Prefect flows composed from ``tasks.prefect_tasks`` (deployment entrypoints)."""
