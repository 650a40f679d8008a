"""A module-level global that a fit changes: tests/integration/test_worker_reuse.py checks
that the next fit on the same worker process imports this module afresh."""

VALUE = "as imported"
