"""What ``evaluate`` and ``batch_predict`` share: loading a model from a reference,
post-processing and writing predictions, describing the files written."""

from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np

from engine.exceptions import ConfigError
from engine.storage import Storage, join
from tasks.sources.files import BATCH_ROWS, Fingerprint, data_files, schema_dict
from tasks.refs import CheckpointRef, DatasetRef


def load_checkpoint(checkpoint: Any) -> Tuple[CheckpointRef, Any]:
    """``(CheckpointRef, its PipelineSpec)`` from a reference or its dict."""
    from pipelines import get_pipeline

    ckpt = CheckpointRef.from_dict(checkpoint)
    if not ckpt.pipeline:
        raise ConfigError(f"CheckpointRef {ckpt.uri!r} names no pipeline: set its "
                          "'pipeline' so that the model can be rebuilt.")
    return ckpt, get_pipeline(ckpt.pipeline)


def engine_checkpoint(ckpt: CheckpointRef) -> Any:
    """The ``engine.Checkpoint`` a reference points at (it must exist)."""
    from engine import Checkpoint
    from engine.exceptions import CheckpointError

    checkpoint = Checkpoint(ckpt.uri)
    if checkpoint.get_model_card() is None and not Storage(
            checkpoint.filesystem, checkpoint.path).exists(checkpoint.path):
        raise CheckpointError(f"Checkpoint {ckpt.uri!r} does not exist (deleted by "
                              "retention, or storage moved?).")
    return checkpoint


def checkpoint_run_uri(ckpt: CheckpointRef) -> str:
    """The run directory of a checkpoint (where ``run_state.json`` lives)."""
    return ckpt.run_uri or ckpt.uri.rstrip("/").rsplit("/", 1)[0]


def add_predicted_label(batch: Dict[str, Any]) -> Dict[str, Any]:
    """A classifier's class per row: the arg max of per-class scores, or a probability
    of class 1 thresholded at 0.5."""
    scores = np.asarray(batch["predictions"])
    if scores.ndim == 2 and scores.shape[1] > 1:
        batch["predicted_label"] = scores.argmax(axis=1)
    elif scores.dtype.kind == "f":  # one probability per row (binary)
        batch["predicted_label"] = (scores.reshape(len(scores)) >= 0.5).astype(np.int64)
    else:
        batch["predicted_label"] = scores.reshape(len(scores))
    return batch


def write_predictions(ds: Any, st: Any, inner: str) -> None:
    """Write a Ray Dataset as Parquet, replacing what ``inner`` held."""
    from ray.data import SaveMode

    ds.write_parquet(inner, filesystem=st.fs, mode=SaveMode.OVERWRITE)


def describe(st: Any, inner: str, name: str, metadata: Dict[str, Any]) -> DatasetRef:
    """A reference of Parquet files someone else wrote: schema, rows and fingerprint
    from one streaming read."""
    import pyarrow.dataset as pds

    paths = data_files(st.fs, inner)
    dataset = pds.dataset(paths, filesystem=st.fs, format="parquet")
    schema = dataset.schema.remove_metadata()
    fingerprint = Fingerprint(schema)
    for batch in dataset.to_batches(batch_size=BATCH_ROWS):
        fingerprint.update(batch)
    return DatasetRef(uri=st.display(inner), format="parquet",
                      num_rows=fingerprint.num_rows, schema=schema_dict(schema),
                      fingerprint=fingerprint.hexdigest(), name=name, metadata=metadata)


def score_in_process(checkpoint: Any, df: Any, keep: Any, kwargs: Dict[str, Any],
                     classifier: bool, st: Any, inner: str) -> None:
    """Score a DataFrame with the checkpoint's predictor here and write one Parquet file
    with the columns and types the actor pool's output has."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from ray.data.extensions import ArrowTensorArray

    from engine.predict import get_predictor_class

    card = checkpoint.get_model_card() or {}
    predictor = get_predictor_class(card.get("framework")).from_checkpoint(checkpoint,
                                                                         **kwargs)
    batch = {c: df[c].to_numpy() for c in df.columns}
    out = {c: batch[c] for c in keep}
    out.update(predictor.predict({c: v for c, v in batch.items() if c not in keep}))
    if classifier:
        out = add_predicted_label(out)
    table = pa.table({k: ArrowTensorArray.from_numpy(v) if np.asarray(v).ndim > 1
                      else pa.array(v) for k, v in out.items()})
    st.delete_dir(inner)  # replaced, as the actor pool's write does
    st.makedirs(inner)
    with st.fs.open_output_stream(join(inner, "part-00000.parquet")) as f:
        pq.write_table(table, f)
