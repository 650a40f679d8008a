"""The booster checkpoint both tree frameworks use: the model in the framework's own
file format (no pickle), saved by ``booster.save_model(path)``; the framework halves
say how a file becomes a booster again."""

from __future__ import annotations

import os
from typing import Any, Optional, Tuple

from engine.checkpoint import Checkpoint, _owned_checkpoint
from engine.exceptions import CheckpointError


class BoosterCheckpoint(Checkpoint):
    """Base of ``XGBoostCheckpoint`` and ``LightGBMCheckpoint``: a checkpoint holding a
    booster in ``MODEL_FILENAME``.

    Loading it runs no code, so it is safe for checkpoints you did not write yourself.
    A subclass sets ``MODEL_FILENAME``, ``_TMP_PREFIX``, ``_MISSING_MODEL`` (what the
    error says is missing: ``{tried}`` the file names looked for, ``{name}`` the first)
    and ``_import_framework`` (the framework's import with its install hint), and
    optionally ``_OTHER_MODEL_FILES``.
    """

    MODEL_FILENAME = "model"
    #: Older spellings, read when MODEL_FILENAME is absent and no filename is given.
    _OTHER_MODEL_FILES: Tuple[str, ...] = ()
    _TMP_PREFIX = "trainyard_booster_"
    _MISSING_MODEL = "booster {name!r}"

    @classmethod
    def from_model(cls, booster: Any, *, preprocessor: Optional[Any] = None,
                   filename: Optional[str] = None) -> Any:
        """Save ``booster`` (and a fitted ``engine.preprocessors`` preprocessor) into a
        new temporary directory, removed once the checkpoint is reported.

        Args:
            booster: The framework's booster.
            preprocessor: A fitted preprocessor to save beside it.
            filename: The model file (default ``MODEL_FILENAME``).
        """
        name = filename or cls.MODEL_FILENAME
        return _owned_checkpoint(
            cls, cls._TMP_PREFIX, lambda d: booster.save_model(os.path.join(d, name)),
            preprocessor)

    @classmethod
    def wrap(cls, checkpoint: Checkpoint) -> Any:
        return cls(checkpoint.path, checkpoint.filesystem)

    def get_model(self, filename: Optional[str] = None) -> Any:
        """The saved booster."""
        return self.load_booster(self, filename)

    @classmethod
    def load_booster(cls, checkpoint: Checkpoint, filename: Optional[str] = None) -> Any:
        """The booster saved in ``checkpoint`` (``MODEL_FILENAME`` unless ``filename``
        says otherwise).

        Raises:
            CheckpointError: the checkpoint holds no such file (the error lists its files).
        """
        names = [filename] if filename else [cls.MODEL_FILENAME, *cls._OTHER_MODEL_FILES]
        with checkpoint.as_directory() as local:
            for name in names:
                path = os.path.join(local, name)
                if os.path.isfile(path):
                    return cls._load_file(path)
            files = sorted(os.listdir(local))
        package = cls.__module__.rsplit(".", 1)[0]
        missing = cls._MISSING_MODEL.format(tried=", ".join(names), name=names[0])
        raise CheckpointError(
            f"Checkpoint {checkpoint.uri!r} holds no {missing}; it has {files}. Save one "
            f"with {cls.__name__}.from_model(booster) or {package}.ReportCallback, or "
            "pass filename=...")

    @classmethod
    def booster_class(cls) -> type:
        """The framework's ``Booster`` class (importing the framework)."""
        return cls._import_framework().Booster

    @classmethod
    def _load_file(cls, path: str) -> Any:
        # Both Booster classes load a saved model this way, without running code.
        return cls.booster_class()(model_file=path)

    @staticmethod
    def _import_framework() -> Any:
        raise NotImplementedError
