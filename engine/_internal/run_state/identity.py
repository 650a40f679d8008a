"""A run is its config: what a run was trained with, kept in its record, and the check
that a ``fit()`` naming an existing run trains the same thing.

A run name is how a retry finds its run again (an orchestrator's retried task, a
``fit()`` called again after a crash): the same name with the same config resumes the
run, or returns its result once it finished. The same name with another training
config, scaling or datasets would return (or resume) a model trained on something else
under the new config's label, so it is refused before anything runs or is written:
:class:`~engine.exceptions.RunConfigMismatchError` lists the keys that differ and the
two ways on (a new name; or ``Trainer.restore(path)``, continuing the stored run with
the config it was trained with).

Values are compared as the record stores them (JSON; other objects by their ``repr``,
without memory addresses). Datasets are compared by name and, where that is cheap and
certain, by what they are: a path by the path, a pandas DataFrame by a hash of its
content, a step's data by its fingerprint; a Ray Dataset only by its name.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Dict, List, Optional

from engine.exceptions import RunConfigMismatchError

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_SCALING_FIELDS = ("num_workers", "use_gpu", "resources_per_worker", "placement_strategy",
                   "trainer_resources", "accelerator_type")
_SHOWN = 6  # differences listed in the message (all of them are on the error)


def jsonable(obj: Any) -> Any:
    """``obj`` as the run record stores it: JSON values as they are, containers
    element by element, anything else by its ``repr`` without memory addresses (a
    function's repr names where it lives, which a second process does not share)."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    try:
        return json.loads(json.dumps(obj))
    except (TypeError, ValueError):
        return _ADDRESS.sub("", repr(obj))


def dataset_identity(datasets: Dict[str, Any]) -> Dict[str, str]:
    """Name → what the dataset is, as far as it can be told without reading it."""
    out = {}
    for name, value in sorted(datasets.items()):
        kind = type(value)
        if isinstance(value, str) or hasattr(value, "__fspath__"):
            out[str(name)] = f"path {value}"
        elif kind.__module__.startswith("pandas") and kind.__name__ == "DataFrame":
            out[str(name)] = _frame_identity(value)
        else:
            out[str(name)] = kind.__name__  # a Ray Dataset: by its name only
    return out


def _frame_identity(frame: Any) -> str:
    """A DataFrame's shape, columns and a hash of its content (pandas' row hashes; a
    frame whose cells pandas cannot hash, such as lists of token ids, by its pickle)."""
    import pickle

    import pandas as pd

    digest = hashlib.sha256(repr([str(c) for c in frame.columns]).encode("utf-8"))
    try:
        digest.update(pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes())
    except TypeError:
        digest.update(pickle.dumps(frame, protocol=5))
    return f"DataFrame {frame.shape[0]}x{frame.shape[1]} {digest.hexdigest()[:16]}"


def run_identity(spec: Any) -> Dict[str, Any]:
    """What a run trains: its training config, scaling and datasets."""
    scaling = spec.scaling_config
    return {"train_loop_config": jsonable(spec.train_loop_config or {}),
            "scaling_config": {f: jsonable(getattr(scaling, f, None))
                               for f in _SCALING_FIELDS if hasattr(scaling, f)},
            "datasets": dict(spec.dataset_identity)}


def differences(stored: Any, given: Any, prefix: str = "") -> List[str]:
    """``key: stored X, given Y`` for every leaf that differs (dicts key by key)."""
    if isinstance(stored, dict) and isinstance(given, dict):
        out = []
        for key in sorted(set(stored) | set(given), key=str):
            where = f"{prefix}.{key}" if prefix else str(key)
            if key not in given:
                out.append(f"{where}: stored {_short(stored[key])}, not given")
            elif key not in stored:
                out.append(f"{where}: not stored, given {_short(given[key])}")
            else:
                out.extend(differences(stored[key], given[key], where))
        return out
    return [] if stored == given else [f"{prefix}: stored {_short(stored)}, given "
                                       f"{_short(given)}"]


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def check_same_run(stored: Optional[Dict[str, Any]], spec: Any, name: str, path: str,
                   trainer: str) -> None:
    """Raise unless ``spec`` trains what the stored run ``stored`` (the record's
    ``identity``; None for a new run or a record written before it was kept) did.

    Raises:
        RunConfigMismatchError: the training config, scaling or datasets differ.
    """
    if not stored or spec.continues_stored_run or spec.trial_info:
        # New; or Trainer.restore (the explicit choice); or a Tuner's trial, whose
        # config its tuner owns (PBT changes it on purpose).
        return
    given = run_identity(spec)
    diffs = [d for part in ("train_loop_config", "scaling_config", "datasets")
             if part in stored
             for d in differences(stored[part], given[part], part)]
    if not diffs:
        return
    listed = "; ".join(diffs[:_SHOWN]) + (f"; and {len(diffs) - _SHOWN} more"
                                           if len(diffs) > _SHOWN else "")
    raise RunConfigMismatchError(
        f"Run {name!r} ({path}) was trained with another configuration than this fit() "
        f"gives it ({listed}). Its checkpoints and result belong to the stored "
        "configuration, so nothing was run or changed. To train this configuration, "
        "give it a new run name (RunConfig(name=...); a pipeline step's run name, or the "
        f"CLI's --name). To go on with the stored run as it was configured, call "
        f"{trainer}.restore({path!r}).fit(), or pass the stored values again.",
        differences=diffs, run_name=name)
