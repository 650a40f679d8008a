"""Experiment-tracking integrations at Ray's paths (``ray.air.integrations``):
``engine.integrations.mlflow``. Nothing is imported until a submodule is."""
