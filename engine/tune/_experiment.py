"""The experiment directory: ``<storage_path>/<name>/`` with one directory per trial, and
the tuner's state, written atomically whenever a trial changes state.

``tuner.pkl`` (cloudpickle) holds what a restore needs: param_space, TuneConfig (with
the searcher's and scheduler's state), RunConfig, and every trial's id, config and
status. ``tuner_state.json`` is the same for people and tools, with configs as JSON.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, List, Optional

from engine._internal.run_state.record import _jsonable
from engine._internal.storage import filesystem as _storage
from engine.config import RunConfig

logger = logging.getLogger("engine")

STATE_VERSION = 1
PICKLE_FILE = "tuner.pkl"
STATE_FILE = "tuner_state.json"


class ExperimentStore:
    """Reads and writes the tuner's state in an experiment directory."""

    def __init__(self, storage: _storage.Storage) -> None:
        self.storage = storage
        self._pickle_warned = False

    @property
    def path(self) -> str:
        return self.storage.display()

    def exists(self) -> bool:
        return self.storage.exists(_storage.join(self.storage.root, PICKLE_FILE))

    def save(self, state: Dict[str, Any]) -> None:
        import ray.cloudpickle as cloudpickle

        st = self.storage
        st.write_json_atomic(_storage.join(st.root, STATE_FILE), _jsonable(_public(state)))
        try:
            blob = cloudpickle.dumps(dict(state, version=STATE_VERSION))
        except Exception as exc:  # e.g. a callback holding a lock or a socket
            if not self._pickle_warned:
                self._pickle_warned = True
                logger.warning("The tuner state could not be pickled (%s: %s); "
                               "Tuner.restore() will not be able to resume this experiment.",
                               type(exc).__name__, exc)
            return
        st.write_bytes_atomic(_storage.join(st.root, PICKLE_FILE), blob)

    def load(self) -> Dict[str, Any]:
        import ray.cloudpickle as cloudpickle

        st = self.storage
        path = _storage.join(st.root, PICKLE_FILE)
        if not st.exists(path):
            raise FileNotFoundError(
                f"No tuner state ({PICKLE_FILE}) in {st.display()}: pass the experiment "
                "directory, <storage_path>/<RunConfig name>."
            )
        state = cloudpickle.loads(st.read_bytes(path))
        if state.get("version", 0) > STATE_VERSION:
            raise RuntimeError(f"{st.display()} was written by a newer trainyard; upgrade "
                               "trainyard to restore it.")
        return state


def _public(state: Dict[str, Any]) -> Dict[str, Any]:
    return {"version": STATE_VERSION, "name": state.get("name"),
            "experiment_id": state.get("experiment_id"),
            "metric": getattr(state.get("tune_config"), "metric", None),
            "mode": getattr(state.get("tune_config"), "mode", None),
            "searcher_done": state.get("searcher_done"),
            "trials": state.get("trials", [])}


def open_experiment(storage_path: Optional[str], name: str, filesystem: Any = None
                    ) -> ExperimentStore:
    from engine._internal.storage.paths import default_root

    base = _storage.Storage.from_path(default_root(storage_path, filesystem), filesystem)
    return ExperimentStore(_storage.Storage(base.fs, _storage.join(base.root, name)))


def fresh_experiment(storage_path: Optional[str], name: str, filesystem: Any = None
                     ) -> ExperimentStore:
    """A store for a new experiment under a default (timestamped) name: ``name``, or
    ``name_2``, ``name_3`` … when a directory of that name exists already. Two Tuners
    started within the same second must not share a directory: the second would resume
    the first's stored trials and return its results instead of running its own."""
    store = open_experiment(storage_path, name, filesystem)
    n = 1
    while store.storage.exists(store.storage.root):
        n += 1
        store = open_experiment(storage_path, f"{name}_{n}", filesystem)
    return store


def tuner_callbacks(callbacks: List[Any]) -> List[Any]:
    """The callbacks the Tuner calls. Every trial's own run already writes the default
    per-trial files (result.json, progress.csv); a user instance of one of those logger
    types would write them a second time, so it stands for the default instead."""
    from engine._internal.execution.callback_runner import default_callbacks

    per_trial = {type(cb) for cb in default_callbacks([])}
    return [cb for cb in callbacks if type(cb) not in per_trial]


def storable_run_config(rc: RunConfig) -> RunConfig:
    """The RunConfig as saved for a restore: callbacks that do not pickle are left out."""
    import ray.cloudpickle as cloudpickle

    try:
        cloudpickle.dumps(rc.callbacks)
        return rc
    except Exception:
        logger.info("RunConfig callbacks cannot be pickled; Tuner.restore() runs without them.")
        return dataclasses.replace(rc, callbacks=[])
