"""Checkpoint: a directory of files, on local disk or in storage.

A checkpoint is code-equivalent when it holds pickles: ``to_dict()`` unpickles, so load
only checkpoints you trust. The driver never unpickles a payload unless asked.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import tempfile
from typing import TYPE_CHECKING, Any, Dict, Iterator, Optional, Tuple

from engine import constants
from engine import preprocessors as _pp
from engine._internal.storage import filesystem as _storage
from engine.exceptions import CheckpointError

if TYPE_CHECKING:  # pyarrow loads when storage is first used, not with engine
    import pyarrow.fs as pafs


class Checkpoint:
    """A directory of files that together hold a model's state.

    Create one with :meth:`from_directory` or :meth:`from_dict`; read one with
    :meth:`as_directory`, :meth:`to_directory` or :meth:`to_dict`.

    Args:
        path: Local path or URI of the directory (``s3://bucket/key``, also with
            ``?endpoint_override=host:port&scheme=http`` for S3-compatible servers).
        filesystem: The ``pyarrow.fs`` filesystem holding ``path`` (inferred if None).
        owns_directory: ``path`` is a local temporary directory made for this checkpoint
            alone (what :meth:`from_dict` and the framework checkpoints' ``from_model``
            make): once the checkpoint is reported and copied into run storage, the
            engine deletes it. Default False: a directory you pass is never deleted.
            Readable afterwards as :attr:`owns_directory`.

    A checkpoint in S3 keeps its endpoint in ``filesystem`` (which pickles its options),
    while :attr:`uri` shows neither endpoint nor credentials. ``Checkpoint(ckpt.uri)``
    reopens it in a process that opened that bucket with an endpoint or received a
    pickled checkpoint or run storage of it (workers do); elsewhere pass
    ``filesystem=``, or set ``AWS_ENDPOINT_URL_S3`` to the server.
    """

    def __init__(self, path: str, filesystem: Optional[pafs.FileSystem] = None, *,
                 owns_directory: bool = False) -> None:
        path = os.fspath(path)
        if filesystem is None:
            filesystem, inner = _storage.resolve(path)
        else:
            inner = _storage.resolve(path, filesystem)[1]
        self.filesystem = filesystem
        self.path = inner
        self.owns_directory = bool(owns_directory)
        self.metrics: Optional[Dict[str, Any]] = None

    # --- constructors ----------------------------------------------------------
    @classmethod
    def from_directory(cls, path: str) -> "Checkpoint":
        """A checkpoint of an existing local directory (or a URI)."""
        path = os.fspath(path)
        if not _storage.is_uri(path):
            path = os.path.abspath(os.path.expanduser(path))
            if not os.path.isdir(path):
                raise CheckpointError(
                    f"Checkpoint.from_directory({path!r}): no such directory. Save your files "
                    "into a directory first, then pass that directory."
                )
        return cls(path)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Checkpoint":
        """A checkpoint holding a dict (small state, e.g. epoch and weights).

        A dict holding torch tensors (state dicts, optimizer state) is written with
        ``torch.save``, so that it can later be read with ``torch.load(weights_only=True)``
        — what predictors do, running no code; any other dict is a plain pickle.
        :meth:`to_dict` reads both, unpickling in full."""
        if not isinstance(data, dict):
            raise CheckpointError(
                f"Checkpoint.from_dict expects a dict, got {type(data).__name__}."
            )
        tmp = tempfile.mkdtemp(prefix="trainyard_ckpt_")
        with open(os.path.join(tmp, constants.DICT_CHECKPOINT_FILE), "wb") as f:
            _dump_dict(data, f)
        return cls(tmp, owns_directory=True)

    @classmethod
    def from_uri(cls, uri: str) -> "Checkpoint":
        """A checkpoint stored at ``uri`` (``s3://…``, ``gs://…``, ``memory://…`` or a
        local path), as in Ray AIR."""
        uri = os.fspath(uri)
        if not _storage.is_uri(uri):
            return cls.from_directory(uri)
        return cls(uri)

    def to_uri(self, uri: str) -> str:
        """Copy the checkpoint's files to ``uri`` (a URI or local path) and return it.

        Raises:
            CheckpointError: ``uri`` already holds files (nothing is overwritten).
        """
        uri = os.fspath(uri)
        if not _storage.is_uri(uri):
            uri = os.path.abspath(os.path.expanduser(uri))
        dest = _storage.Storage.from_path(uri)
        if dest.list_files(dest.root):
            raise CheckpointError(
                f"Checkpoint.to_uri({uri!r}): the target already holds files; pick an "
                "empty location (nothing was overwritten).")
        with self.as_directory() as local_dir:
            dest.upload_dir(local_dir, dest.root)
        return uri

    # --- metadata ---------------------------------------------------------------
    def get_metadata(self) -> Dict[str, Any]:
        """The checkpoint's metadata dict (``{}`` when none was set), as in Ray."""
        storage = _storage.Storage(self.filesystem, self.path)
        return storage.read_json(self._metadata_path()) or {}

    def set_metadata(self, metadata: Dict[str, Any]) -> None:
        """Replace the checkpoint's metadata with ``metadata`` (JSON-able values), kept
        in a ``.metadata.json`` file inside the checkpoint as Ray keeps it.

        Raises:
            CheckpointError: ``metadata`` is not a dict of JSON-able values.
        """
        import json

        if not isinstance(metadata, dict):
            raise CheckpointError(f"Checkpoint.set_metadata() takes a dict, got "
                                  f"{type(metadata).__name__}.")
        try:
            json.dumps(metadata)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(
                f"Checkpoint metadata must be JSON-serialisable ({exc}): store numbers, "
                "strings, lists and dicts, and put other objects in the checkpoint's "
                "files.") from None
        storage = _storage.Storage(self.filesystem, self.path)
        storage.write_json_atomic(self._metadata_path(), metadata)

    def update_metadata(self, metadata: Dict[str, Any]) -> None:
        """Merge ``metadata`` into the checkpoint's metadata (keys given win)."""
        if not isinstance(metadata, dict):
            raise CheckpointError(f"Checkpoint.update_metadata() takes a dict, got "
                                  f"{type(metadata).__name__}.")
        merged = self.get_metadata()
        merged.update(metadata)
        self.set_metadata(merged)

    def _metadata_path(self) -> str:
        return _storage.join(self.path, constants.CHECKPOINT_METADATA_FILE)

    # --- readers ---------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        return _storage.is_local(self.filesystem)

    @property
    def uri(self) -> str:
        """Where the checkpoint lives: a local path, or a URI without credentials and
        without query (endpoint) parameters."""
        if self.is_local:
            return self.path
        return _storage.Storage(self.filesystem, self.path).display()

    def to_directory(self, path: Optional[str] = None) -> str:
        """Copy the checkpoint's files into a local directory and return its path."""
        target = path or tempfile.mkdtemp(prefix="trainyard_ckpt_")
        os.makedirs(target, exist_ok=True)
        try:
            _storage.Storage(self.filesystem, self.path).download_dir(self.path, target)
        except BaseException:
            if path is None:  # a temporary directory of ours: no half copy left behind
                shutil.rmtree(target, ignore_errors=True)
            raise
        return target

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """A local directory with the checkpoint's files, for reading only.

        A local checkpoint is given in place; a remote one is downloaded to a temporary
        directory that is removed afterwards.
        """
        if self.is_local:
            yield self.path
            return
        tmp = self.to_directory()
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def to_dict(self) -> Dict[str, Any]:
        """Unpickle a checkpoint made by :meth:`from_dict`. A pickle runs code when
        loaded: call this on trusted checkpoints only (the engine itself never does)."""
        storage = _storage.Storage(self.filesystem, self.path)
        dict_file = _storage.join(self.path, constants.DICT_CHECKPOINT_FILE)
        if not storage.exists(dict_file):
            raise CheckpointError(
                f"Checkpoint {self.uri!r} holds no {constants.DICT_CHECKPOINT_FILE}: it was "
                "not made by Checkpoint.from_dict. Read its files with as_directory()."
            )
        return _load_dict(storage.read_bytes(dict_file))

    def get_model_card(self) -> Optional[Dict[str, Any]]:
        """The ``model_card.json`` a trainer wrote into this checkpoint (framework,
        feature and label columns, metrics, config, created_at, data fingerprint), or
        None for a checkpoint made outside a trainer."""
        storage = _storage.Storage(self.filesystem, self.path)
        return storage.read_json(_storage.join(self.path, constants.MODEL_CARD_FILE))

    def get_preprocessor(self, allow_pickle: bool = True) -> Optional[Any]:
        """The fitted preprocessor the trainer saved in this checkpoint, or None.

        Built-in preprocessors are stored as JSON (reading them runs no code); a custom
        one is a pickle, unpickled here because you asked for it — trusted checkpoints
        only. Predictors pass ``allow_pickle=False`` unless told otherwise, and then a
        pickled preprocessor is a :class:`CheckpointError`.
        """
        return _pp.load_preprocessor(_storage.Storage(self.filesystem, self.path), self.path,
                                     allow_pickle=allow_pickle)

    def get_internal_representation(self) -> Tuple[str, str]:
        """``("local_path", path)`` or ``("uri", uri)``, as in the seed pages."""
        return ("local_path", self.path) if self.is_local else ("uri", self.uri)

    def __repr__(self) -> str:
        return f"Checkpoint(path={self.uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    def __reduce__(self):
        return (_rebuild, (self.path, self.filesystem, self.metrics))


def _rebuild(path: str, filesystem: pafs.FileSystem, metrics: Optional[Dict[str, Any]]
             ) -> Checkpoint:
    ckpt = Checkpoint(path, filesystem)
    ckpt.metrics = metrics
    _storage.remember_filesystem(filesystem, path)  # so Checkpoint(ckpt.uri) works here too
    return ckpt


def _dump_dict(data: Dict[str, Any], f: Any) -> None:
    """torch.save's format when the dict holds tensors (state dicts: then predictors
    load it with weights_only=True), else a plain pickle. torch.save pickles with
    protocol 2, which stores bytes and numpy arrays half again as large, so it is used
    only where it buys the safe load."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and _holds_tensor(data, torch.Tensor):
        torch.save(data, f)  # torch's default protocol 2: what weights_only can read
    else:
        pickle.dump(data, f, protocol=pickle.HIGHEST_PROTOCOL)


def _holds_tensor(obj: Any, tensor_type: type, depth: int = 0) -> bool:
    if isinstance(obj, tensor_type):
        return True
    if depth > 6:
        return False
    if isinstance(obj, dict):
        return any(_holds_tensor(v, tensor_type, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_holds_tensor(v, tensor_type, depth + 1) for v in obj[:1000])
    return False


def _is_torch_archive(raw: bytes) -> bool:
    return raw[:4] == b"PK\x03\x04"  # torch.save's zip format


def _load_dict(raw: bytes) -> Dict[str, Any]:
    """Full unpickling of a dict checkpoint, either format (trusted data only)."""
    if _is_torch_archive(raw):
        import io

        import torch

        return torch.load(io.BytesIO(raw), weights_only=False)
    return pickle.loads(raw)


def load_dict_safely(raw: bytes, uri: str = "") -> Dict[str, Any]:
    """A dict checkpoint read without running code: only the ``torch.save`` format, with
    ``weights_only=True`` (tensors, numbers, strings, containers), onto the CPU.

    Raises:
        CheckpointError: a plain pickle, or one holding other objects — loading those
            runs code; the message says how to opt in for a trusted checkpoint.
    """
    hint = ("Loading it would run code: if you trust this checkpoint, pass "
            "allow_pickle=True; to avoid pickles, save weights with "
            "engine.torch.TorchCheckpoint.from_model(model) or report "
            "Checkpoint.from_dict({...}) from a process that imports torch.")
    if not _is_torch_archive(raw):
        raise CheckpointError(
            f"The dict checkpoint {uri!r} is a plain pickle. {hint}")
    import io

    import torch

    try:
        return torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")
    except Exception as exc:  # torch's UnpicklingError names the refused global
        text = str(exc)
        reason = text.split("WeightsUnpickler error:", 1)[-1].strip() if \
            "WeightsUnpickler error:" in text else text.strip()
        first = reason.splitlines()[0] if reason else type(exc).__name__
        raise CheckpointError(
            f"The dict checkpoint {uri!r} holds objects other than tensors, numbers and "
            f"containers ({first[:200]}). {hint}") from None


def _owned_checkpoint(cls: type, prefix: str, write_model: Any,
                      preprocessor: Optional[Any] = None) -> Any:
    """A new checkpoint of type ``cls`` in a temporary directory that is removed once it
    is reported: ``write_model(directory)`` saves the model, and a fitted
    ``engine.preprocessors`` preprocessor is saved beside it (what the framework
    checkpoints' ``from_model`` share)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    write_model(tmp)
    if preprocessor is not None:
        name, data = _pp.dumps(preprocessor)
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(data)
    return cls(tmp, owns_directory=True)
