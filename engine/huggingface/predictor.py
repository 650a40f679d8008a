"""TransformersPredictor: a checkpoint of a ``transformers.Trainer`` as a ``pipeline``,
for one batch in process or a whole dataset through ``BatchPredictor``."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from engine.checkpoint import Checkpoint
from engine.exceptions import CheckpointError, ConfigError
from engine.predictor import Predictor

# The pipeline task of a model class, by the suffix of its name (config.architectures).
_TASK_BY_ARCHITECTURE = (
    ("ForSequenceClassification", "text-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForQuestionAnswering", "question-answering"),
    ("ForMaskedLM", "fill-mask"),
    ("ForCausalLM", "text-generation"),
    ("LMHeadModel", "text-generation"),
    ("ForImageClassification", "image-classification"),
    ("ForAudioClassification", "audio-classification"),
)
_TEXT_TASKS = {"text-classification", "token-classification", "question-answering",
               "fill-mask", "text-generation", "zero-shot-classification",
               "feature-extraction"}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json",
                    "tokenizer.model", "spiece.model")
_MODEL_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


class TransformersPredictor(Predictor):
    """Scores batches with a ``transformers.pipeline`` built from a checkpoint.

    ``predict(df)`` passes the feature column (one column: its values; several: one dict
    per row keyed by column name, e.g. ``text``/``text_pair``) to the pipeline and
    returns its outputs as columns: for text classification ``label`` and ``score``,
    plus ``predictions``, the class id from the model's ``label2id`` (so
    ``engine.predict.evaluate`` can score it); for other tasks one column per key of the
    pipeline's output dicts, or ``predictions`` holding each row's output.

    Args:
        pipeline: A ready ``transformers.Pipeline``.
        call_kwargs: Passed on every pipeline call (e.g. ``{"truncation": True}``).
        preprocessor, model_card, feature_columns: As for :class:`engine.predict.Predictor`.
    """

    framework = "transformers"

    def __init__(self, pipeline: Any, call_kwargs: Optional[Dict[str, Any]] = None,
                 preprocessor: Optional[Any] = None,
                 model_card: Optional[Dict[str, Any]] = None,
                 feature_columns: Optional[Sequence[str]] = None) -> None:
        super().__init__(preprocessor, model_card, feature_columns)
        self.pipeline = pipeline
        self.call_kwargs = dict(call_kwargs or {})

    @classmethod
    def _from_checkpoint(cls, checkpoint: Checkpoint, task: Optional[str] = None,
                         tokenizer: Optional[Any] = None, device: Optional[Any] = None,
                         pipeline_cls: Optional[type] = None,
                         call_kwargs: Optional[Dict[str, Any]] = None,
                         feature_columns: Optional[Sequence[str]] = None,
                         **pipeline_kwargs: Any) -> "TransformersPredictor":
        """Build the pipeline from the model (and tokenizer) saved in ``checkpoint``.

        Args:
            checkpoint: A checkpoint of a ``TransformersTrainer`` run (a
                ``transformers.Trainer`` checkpoint directory) or any directory
                ``save_pretrained`` wrote.
            task: The pipeline task; by default inferred from the model class
                (``...ForSequenceClassification`` → ``"text-classification"`` …).
            tokenizer: A tokenizer (object or path) when the checkpoint has none (pass
                ``processing_class=tokenizer`` to the Trainer to save it with each one).
            device: Where the pipeline runs; default this process's GPU if it has one.
            pipeline_cls: A custom ``Pipeline`` subclass.
            call_kwargs: Passed on every pipeline call.
            feature_columns: The input column(s).
            **pipeline_kwargs: Passed to ``transformers.pipeline``.

        Raises:
            CheckpointError: the checkpoint holds no model saved with ``save_pretrained``.
            ConfigError: the task cannot be inferred, or no tokenizer is saved or given.
        """
        from transformers import pipeline as make_pipeline

        with checkpoint.as_directory() as path:
            files = set(os.listdir(path))
            if "config.json" not in files or not files & set(_MODEL_FILES):
                raise CheckpointError(
                    f"Checkpoint {checkpoint.uri!r} holds no transformers model (config.json "
                    f"and model weights; it has {sorted(files)[:12]}): save one with "
                    "transformers.Trainer / model.save_pretrained, or load it yourself and "
                    "pass TransformersPredictor(pipeline=...).")
            task = task or _infer_task(path, checkpoint.uri)
            if tokenizer is None and files & set(_TOKENIZER_FILES):
                tokenizer = path
            if tokenizer is None and task in _TEXT_TASKS:
                raise ConfigError(
                    f"Checkpoint {checkpoint.uri!r} has no tokenizer: pass "
                    "processing_class=tokenizer to transformers.Trainer so that it is saved "
                    "with every checkpoint, or pass tokenizer=... here.")
            kwargs = dict(pipeline_kwargs)
            if pipeline_cls is not None:
                kwargs["pipeline_class"] = pipeline_cls
            pipe = make_pipeline(task, model=path, tokenizer=tokenizer,
                                 device=device if device is not None else _default_device(),
                                 **kwargs)
        return cls(pipe, call_kwargs=call_kwargs, feature_columns=feature_columns)

    def _predict_numpy(self, features: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        names = list(features)
        if not names:
            raise ConfigError("TransformersPredictor needs an input column: pass "
                              "feature_columns=['text'] (or the model card's).")
        n = len(features[names[0]])
        if len(names) == 1:
            inputs: List[Any] = [_python(v) for v in features[names[0]]]
        else:
            inputs = [{name: _python(features[name][i]) for name in names} for i in range(n)]
        outputs = self.pipeline(inputs, **self.call_kwargs) if n else []
        return _columns(list(outputs), n, self.pipeline)

    def __repr__(self) -> str:
        task = getattr(self.pipeline, "task", None)
        return f"TransformersPredictor(task={task!r}, preprocessor={self.preprocessor!r})"


def _infer_task(path: str, uri: str) -> str:
    with open(os.path.join(path, "config.json")) as f:
        architectures = json.load(f).get("architectures") or []
    for arch in architectures:
        for suffix, task in _TASK_BY_ARCHITECTURE:
            if arch.endswith(suffix):
                return task
    raise ConfigError(
        f"Cannot tell the pipeline task of checkpoint {uri!r} (model classes "
        f"{architectures or 'not recorded'}): pass task=..., e.g. "
        "task='text-classification'.")


def _default_device() -> Any:
    from engine.torch import get_device

    device = get_device()
    return device if device.type != "cpu" else -1


def _python(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def _columns(outputs: List[Any], n: int, pipeline: Any) -> Dict[str, np.ndarray]:
    """The pipeline's per-row outputs as columns."""
    rows = [o[0] if isinstance(o, list) and len(o) == 1 and isinstance(o[0], dict) else o
            for o in outputs]
    if n and all(isinstance(r, dict) for r in rows):
        keys = [k for k in rows[0] if all(k in r for r in rows)]
        out = {k: _array([r[k] for r in rows]) for k in keys}
        label2id = getattr(getattr(getattr(pipeline, "model", None), "config", None),
                           "label2id", None) or {}
        if "label" in out and "predictions" not in out and label2id and all(
                r["label"] in label2id for r in rows):
            out["predictions"] = np.array([label2id[r["label"]] for r in rows], dtype=np.int64)
        return out
    return {"predictions": _array(rows)}


def _array(values: List[Any]) -> np.ndarray:
    if values and all(isinstance(v, (int, float, bool, np.number)) for v in values):
        return np.asarray(values)
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


__all__ = ["TransformersPredictor"]
