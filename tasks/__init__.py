"""Pipeline steps (ingest, split, train, tune, evaluate, batch_predict, promote) that take
and return small JSON-serialisable references, plus thin adapters for orchestrators.

``tasks.core`` holds the steps; ``tasks.refs`` the references; ``tasks.prefect_tasks`` the
Prefect wrappers; ``tasks.cli`` the ``trainyard`` command. Importing this package imports
no orchestrator and no training framework.
"""

from tasks.refs import CheckpointRef, DatasetRef, Promotion, TuneRef

__all__ = ["DatasetRef", "CheckpointRef", "TuneRef", "Promotion"]
