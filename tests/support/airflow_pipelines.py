"""A quick variant of the ``digits`` pipeline for tests that run the shipped DAGs with
their default params (a scheduled run passes no conf): one grid point, two epochs, a
gate any trained model passes. Registered with
``TRAINYARD_PIPELINES=digits_quick=tests.support.airflow_pipelines:QUICK``."""

from __future__ import annotations

import dataclasses

from pipelines.digits import SPEC

QUICK = dataclasses.replace(
    SPEC, name="digits_quick", description="digits, 2 epochs, one grid point (tests)",
    defaults={**SPEC.defaults, "epochs": 2},
    param_space={"lr": {"grid_search": [5e-3]}}, gate={"accuracy": ">=0.5"})
