"""Prefect flows composed from ``tasks.prefect`` (deployment entrypoints)."""
