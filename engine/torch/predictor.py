"""TorchPredictor: a PyTorch model from a checkpoint, scoring batches.

    predictor = TorchPredictor.from_checkpoint(ckpt, model=NeuralNetwork())   # state dict
    predictor = TorchPredictor.from_checkpoint(ckpt)             # a TorchScript model file
    predictor.predict(df)                     # DataFrame with a "predictions" column

Where the weights come from, in this order:

- ``model.pt`` written by :class:`~engine.torch.TorchCheckpoint` (``torch.load`` with
  ``weights_only=True``: no code runs);
- a dict checkpoint (``Checkpoint.from_dict``) holding the state dict under
  ``"model_weights"`` (as the seeds and ``pipelines/digits.py`` save), ``"model_state_dict"``,
  ``"state_dict"`` or ``"model"`` (a pickle: trusted checkpoints only);
- with ``model=None``: a TorchScript file (``torch.jit.save``; ``model.pt``, or any
  ``.pt``/``.pth``/``.ts``/``.jit`` file, or ``model_file=``), or a whole ``nn.Module``
  pickled under ``"model"`` in a dict checkpoint.
"""

from __future__ import annotations

import os
import warnings
import zipfile
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
import torch

from engine import constants
from engine._internal.data.batches import feature_matrix
from engine.checkpoint import Checkpoint, _load_dict, load_dict_safely
from engine.exceptions import CheckpointError, ConfigError
from engine.predictor import Predictor
from engine.torch.checkpoint import MODEL_STATE_FILE

_STATE_DICT_KEYS = ("model_weights", "model_state_dict", "state_dict", "model")
_PREFERRED_FILES = (MODEL_STATE_FILE, "model.ts", "model_scripted.pt", "scripted_model.pt")
_MODEL_SUFFIXES = (".pt", ".pth", ".ts", ".jit")


class TorchPredictor(Predictor):
    """Scores batches with a ``torch.nn.Module`` (eval mode, ``torch.inference_mode``).

    Features: a single column holding fixed-size arrays is the model input as it is
    (``(n, 64)`` for digits' ``"x"``); several scalar columns are stacked into
    ``(n, k)`` in feature-column order. Floating inputs are cast to the model's
    parameter dtype. An ``(n, 1)`` output becomes a flat ``"predictions"`` column; a
    dict of tensors becomes one column per key.

    Args:
        model: The module (weights loaded).
        preprocessor: Applied to each batch first.
        use_gpu: Run on ``cuda`` (needs a visible GPU).
        dtype: Input dtype for floating features; default: the model's.
    """

    framework = "torch"

    def __init__(self, model: torch.nn.Module, preprocessor: Optional[Any] = None,
                 use_gpu: bool = False, dtype: Optional[torch.dtype] = None,
                 model_card: Optional[Dict[str, Any]] = None,
                 feature_columns: Optional[Sequence[str]] = None) -> None:
        super().__init__(preprocessor, model_card, feature_columns)
        if use_gpu and not torch.cuda.is_available():
            raise ConfigError("use_gpu=True but torch sees no CUDA device: pass "
                              "use_gpu=False or run where a GPU is visible.")
        self.device = torch.device("cuda" if use_gpu else "cpu")
        self.model = model.to(self.device).eval()
        self.dtype = dtype or _param_dtype(model)

    @classmethod
    def _from_checkpoint(cls, checkpoint: Checkpoint, model: Optional[torch.nn.Module] = None,
                         use_gpu: bool = False, model_file: Optional[str] = None,
                         dtype: Optional[torch.dtype] = None,
                         allow_pickle: bool = False) -> "TorchPredictor":
        """Args: ``model`` to load a state dict into (None: a saved/scripted model),
        ``use_gpu``, ``model_file`` (a file of the checkpoint), ``dtype``,
        ``allow_pickle`` (load pickles — code — from a trusted checkpoint)."""
        if model is not None and not isinstance(model, torch.nn.Module):
            raise ConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
        with checkpoint.as_directory() as local:
            module = load_model(local, model, model_file, uri=checkpoint.uri,
                                allow_pickle=allow_pickle)
        return cls(module, use_gpu=use_gpu, dtype=dtype)

    def _predict_numpy(self, features: Dict[str, np.ndarray]
                       ) -> Union[np.ndarray, Dict[str, np.ndarray]]:
        x = _as_tensor(feature_matrix(features, list(features)))
        if x.is_floating_point() and x.dtype != self.dtype:
            x = x.to(self.dtype)
        with torch.inference_mode():
            out = self.model(x.to(self.device))
        if isinstance(out, dict):
            return {str(k): _to_numpy(v) for k, v in out.items()}
        if isinstance(out, (tuple, list)):
            out = out[0]  # e.g. (logits, hidden): the first output is the prediction
        return _to_numpy(out)


# --- loading ------------------------------------------------------------------------------
def load_model(local_dir: str, model: Optional[torch.nn.Module] = None,
               model_file: Optional[str] = None, uri: str = "",
               allow_pickle: bool = False) -> torch.nn.Module:
    """The module a checkpoint directory holds: ``model`` with the saved state dict
    loaded, or (``model=None``) the TorchScript module saved there — or, with
    ``allow_pickle=True`` only, a module pickled in a dict checkpoint."""
    files = sorted(os.listdir(local_dir))
    if model_file is not None and model_file not in files:
        raise CheckpointError(f"Checkpoint {uri or local_dir!r} has no file {model_file!r} "
                              f"(it holds {files}).")
    if model is None:
        return _saved_module(local_dir, files, model_file, uri, allow_pickle)
    state = _state_dict(local_dir, files, model_file, uri, allow_pickle)
    model.load_state_dict({k[len("module."):] if k.startswith("module.") else k: v
                           for k, v in state.items()})
    return model


def _state_dict(local_dir: str, files: list, model_file: Optional[str], uri: str,
                allow_pickle: bool = False) -> Dict[str, Any]:
    name = model_file or (MODEL_STATE_FILE if MODEL_STATE_FILE in files else None)
    if name is not None:
        path = os.path.join(local_dir, name)
        if _is_torchscript(path):
            return torch.jit.load(path, map_location="cpu").state_dict()
        loaded = torch.load(path, map_location="cpu", weights_only=True)
        state = loaded.get("model", loaded) if isinstance(loaded, dict) else None
        if isinstance(state, dict):
            return state
    if constants.DICT_CHECKPOINT_FILE in files:
        with open(os.path.join(local_dir, constants.DICT_CHECKPOINT_FILE), "rb") as f:
            raw = f.read()
        data = _load_dict(raw) if allow_pickle else load_dict_safely(raw, uri or local_dir)
        for key in _STATE_DICT_KEYS:
            value = data.get(key)
            if isinstance(value, torch.nn.Module):
                return getattr(value, "module", value).state_dict()
            if isinstance(value, dict) and value:
                return value
        if data and all(isinstance(v, torch.Tensor) for v in data.values()):
            return data  # the dict is itself a state dict
        raise CheckpointError(
            f"The dict checkpoint {uri or local_dir!r} has no state dict under any of "
            f"{list(_STATE_DICT_KEYS)} (keys: {sorted(data)}). Save it as "
            "Checkpoint.from_dict({'model_weights': model.state_dict()}) or with "
            "TorchCheckpoint.from_model(model).")
    raise CheckpointError(
        f"Checkpoint {uri or local_dir!r} holds no model weights ({files}): save them with "
        "TorchCheckpoint.from_model(model) or Checkpoint.from_dict({'model_weights': ...}).")


def _saved_module(local_dir: str, files: list, model_file: Optional[str], uri: str,
                  allow_pickle: bool = False) -> torch.nn.Module:
    candidates = [model_file] if model_file else (
        [f for f in _PREFERRED_FILES if f in files]
        + [f for f in files if f.endswith(_MODEL_SUFFIXES) and f not in _PREFERRED_FILES])
    for name in candidates:
        path = os.path.join(local_dir, name)
        if _is_torchscript(path):
            return torch.jit.load(path, map_location="cpu")
    if constants.DICT_CHECKPOINT_FILE in files and not model_file and allow_pickle:
        with open(os.path.join(local_dir, constants.DICT_CHECKPOINT_FILE), "rb") as f:
            data = _load_dict(f.read())  # a pickled module is code: asked for
        module = data.get("model") if isinstance(data, dict) else None
        if isinstance(module, torch.nn.Module):
            return getattr(module, "module", module)
    raise CheckpointError(
        f"Checkpoint {uri or local_dir!r} holds no saved model ({files}): pass "
        "model=YourModule() to load its state dict, or save a TorchScript model "
        "(torch.jit.save(torch.jit.script(model), 'model.pt')).")


def _is_torchscript(path: str) -> bool:
    """A ``torch.jit.save`` archive (a zip with ``constants.pkl`` and ``code/``), as
    opposed to a ``torch.save`` one."""
    if not (os.path.isfile(path) and zipfile.is_zipfile(path)):
        return False
    with zipfile.ZipFile(path) as zf:
        return any(n.endswith("/constants.pkl") or n == "constants.pkl"
                   for n in zf.namelist())


def _param_dtype(model: torch.nn.Module) -> torch.dtype:
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def _as_tensor(x: np.ndarray) -> torch.Tensor:
    x = np.ascontiguousarray(x)
    with warnings.catch_warnings():
        # Ray Data hands out read-only (zero-copy) arrays; inference never writes to them.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.as_tensor(x)


def _to_numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)
