"""The pipeline steps, independent of any orchestrator: references in, references out.

    data = ingest("sklearn:digits", storage="/data/ty")
    splits = split(data, test_size=0.2, seed=0, stratify_column="target")
    ckpt = train("digits", splits, {"num_workers": 2},
                 {"name": run_name_for(run_id, "train"), "storage": "/data/ty"})
    metrics = evaluate(ckpt, splits["validation"])
    promote(ckpt, metrics, alias="production", gate={"accuracy": ">=0.9"})
    preds = batch_predict(resolve_alias("digits", storage="/data/ty"), data)

Every function takes and returns JSON-able values and the references of ``tasks.refs``
(dicts of them are accepted too), so the Prefect and Airflow adapters only wrap them.
Steps are idempotent for a retry: ingest and split reuse a committed copy of the same
content, ``train`` and ``tune`` resume the run named in ``run`` from its latest committed
checkpoint, ``batch_predict`` replaces its output, ``promote`` writes a new history entry.

One module per kind of step: ``data`` (ingest, split), ``training`` (train, tune),
``prediction`` (evaluate, batch_predict), ``promotion`` (promote); the alias helpers are
the registry's (``tasks.registry.aliases``), re-exported here.
"""

from tasks.registry.aliases import alias_history, promoted_checkpoint, resolve_alias
from tasks.steps.data import ingest, split
from tasks.steps.names import TaskError, run_name_for
from tasks.steps.prediction import batch_predict, evaluate
from tasks.steps.promotion import promote
from tasks.steps.training import train, tune

__all__ = ["ingest", "split", "train", "tune", "evaluate", "batch_predict", "promote",
           "resolve_alias", "promoted_checkpoint", "alias_history", "run_name_for", "TaskError"]
