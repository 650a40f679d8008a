"""What ``Trainer.restore(path)`` needs: the trainer, kept in its run directory.

``fit()`` pickles (cloudpickle) the trainer into ``<run dir>/trainer.pkl`` before the
first worker starts, as Ray Train does. Datasets other than paths are left out (they can
be large, and a ``ray.data.Dataset`` does not outlive its Ray instance): ``restore``
takes them again, and says which ones it needs. The pickle is the user's own code and
objects: restoring it runs code, like loading any pickle.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
from typing import Any, Dict, Optional, Tuple

from engine import constants
from engine._internal.storage import filesystem as _storage
from engine.exceptions import ConfigError

logger = logging.getLogger("engine")

#: A trainer pickling larger than this (a training function that captures its data) is
#: not kept: restore() would copy that data into every run directory.
MAX_STATE_BYTES = 64 * 1024 * 1024

#: What restore() may replace besides the datasets (the rest comes from the pickle).
RESTORE_OVERRIDES = ("train_loop_per_worker", "train_loop_config", "scaling_config",
                     "preprocessor", "resume_from_checkpoint")


def _is_path(data: Any) -> bool:
    return isinstance(data, (str, os.PathLike)) or (
        isinstance(data, (list, tuple)) and bool(data)
        and all(isinstance(p, (str, os.PathLike)) for p in data))


def save_trainer(trainer: Any, storage: _storage.Storage) -> None:
    """Write ``trainer`` (less its in-memory datasets) into the run directory. A trainer
    that cannot be pickled is logged and skipped: only ``restore`` needs it."""
    import cloudpickle

    state = copy.copy(trainer)
    datasets = dict(getattr(trainer, "datasets", None) or {})
    state.datasets = {k: v for k, v in datasets.items() if _is_path(v)}
    state._restore_needs = sorted(k for k in datasets if k not in state.datasets)
    try:
        data = cloudpickle.dumps(state)
    except Exception as exc:  # noqa: BLE001 - fit() goes on; restore() will say why
        logger.warning("%s cannot be pickled (%s: %s): Trainer.restore() will not work for "
                       "this run; fit() again with the same RunConfig(name, storage_path) "
                       "resumes it.", type(trainer).__name__, type(exc).__name__, exc)
        return
    if len(data) > MAX_STATE_BYTES:
        logger.warning("%s pickles to %d MiB (its training function or config captures "
                       "data?): it is not kept, so Trainer.restore() will not work for this "
                       "run; fit() again with the same RunConfig(name, storage_path) "
                       "resumes it.", type(trainer).__name__, len(data) >> 20)
        return
    storage.makedirs(storage.root)
    storage.write_bytes_atomic(_storage.join(storage.root, constants.TRAINER_STATE_FILE),
                               data)


def _open(path: str, filesystem: Any) -> Tuple[_storage.Storage, str]:
    path = os.fspath(path)
    if not _storage.is_uri(path):
        path = os.path.abspath(os.path.expanduser(path))
    storage = _storage.Storage.from_path(path.rstrip("/") or "/", filesystem)
    return storage, _storage.join(storage.root, constants.TRAINER_STATE_FILE)


def can_restore(path: str, filesystem: Any = None) -> bool:
    """Whether ``path`` is a run directory that a trainer's ``fit()`` left a trainer in."""
    try:
        storage, state = _open(path, filesystem)
        return storage.exists(state)
    except Exception:  # noqa: BLE001 - an unusable path cannot be restored
        return False


def restore_trainer(cls: type, path: str, datasets: Optional[Dict[str, Any]],
                    filesystem: Any, overrides: Dict[str, Any]) -> Any:
    """The trainer saved in ``path``, set up to resume that run (see module docstring).

    Raises:
        FileNotFoundError: ``path`` holds no saved trainer.
        ConfigError: another trainer class saved it, a dataset is missing, or an
            argument that restore cannot take.
    """
    import cloudpickle

    storage, state_file = _open(path, filesystem)
    if not storage.exists(state_file):
        raise FileNotFoundError(
            f"{cls.__name__}.restore({path!r}): no {constants.TRAINER_STATE_FILE} there. "
            "Pass the run directory of an earlier fit() (Result.path); use "
            f"{cls.__name__}.can_restore(path) to check first.")
    trainer = cloudpickle.loads(storage.read_bytes(state_file))
    if not isinstance(trainer, cls):
        raise ConfigError(
            f"{path!r} holds a {type(trainer).__name__}, not a {cls.__name__}: call "
            f"{type(trainer).__name__}.restore(path).")
    unknown = sorted(set(overrides) - set(RESTORE_OVERRIDES))
    if unknown:
        raise ConfigError(f"{cls.__name__}.restore() cannot change {unknown}: it takes "
                          f"datasets and {', '.join(RESTORE_OVERRIDES)}.")
    for key, value in overrides.items():
        if value is not None:
            setattr(trainer, key, value)
    _restore_datasets(trainer, datasets, path)
    trainer._continues_stored_run = True  # the explicit way on with the stored run
    parent, _, name = storage.root.rstrip("/").rpartition("/")
    trainer.run_config = dataclasses.replace(
        trainer.run_config, name=name, storage_path=storage.display(parent or "/"),
        storage_filesystem=storage.fs if not storage.local else None)
    return trainer


def _restore_datasets(trainer: Any, datasets: Optional[Dict[str, Any]], path: str) -> None:
    needs = list(getattr(trainer, "_restore_needs", []) or [])
    given = dict(datasets or {})
    missing = [k for k in needs if k not in given]
    if missing:
        raise ConfigError(
            f"{type(trainer).__name__}.restore({path!r}) needs the datasets it was given "
            f"in memory again: pass datasets={{{', '.join(repr(k) for k in missing)}: ...}} "
            "(paths were kept, Ray Datasets and DataFrames are not stored).")
    if given:
        from engine._internal.data.datasets import check_dataset_inputs

        check_dataset_inputs(given)
    trainer.datasets = {**(getattr(trainer, "datasets", None) or {}), **given}
    trainer._restore_needs = []
