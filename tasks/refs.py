"""References that pipeline tasks pass to each other: URIs plus metadata, never objects.

Each is a small dataclass of JSON values, so that it survives every hand-off an
orchestrator makes: Prefect result persistence (JSON or pickle serializer), Airflow
XCom (``airflow.serialization.serde`` knows dataclasses), a CLI's ``--json`` output.

    ref = DatasetRef.from_json(text)           # and ref.to_json(), ref.to_dict()
    ckpt = CheckpointRef.from_dict(payload)

Unknown keys in a payload are an error (a typo must not pass silently); missing optional
keys take their defaults, so payloads written by an older trainyard still load.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Type, TypeVar

R = TypeVar("R", bound="_Ref")


class RefError(ValueError):
    """A reference payload is malformed: the message says which field and why."""


class _Ref:
    """JSON round-trip shared by the reference types."""

    def to_dict(self) -> Dict[str, Any]:
        """A dict of JSON values (nested references become dicts too)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def to_json(self, indent: Optional[int] = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    @classmethod
    def from_dict(cls: Type[R], data: Dict[str, Any]) -> R:
        """Rebuild a reference from :meth:`to_dict`'s output (or a JSON object).

        Raises:
            RefError: ``data`` is not a dict, lacks a required field or has unknown keys.
        """
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise RefError(f"{cls.__name__}.from_dict expects a dict, got "
                           f"{type(data).__name__}.")
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - names)
        if unknown:
            raise RefError(f"{cls.__name__} has no fields {unknown} (it has {sorted(names)}).")
        kwargs = {k: cls._decode_field(k, v) for k, v in data.items()}
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise RefError(f"{cls.__name__}: {exc}") from None

    @classmethod
    def from_json(cls: Type[R], text: str) -> R:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RefError(f"{cls.__name__}.from_json: not JSON ({exc}).") from None
        return cls.from_dict(data)

    @classmethod
    def _decode_field(cls, name: str, value: Any) -> Any:
        return value


def _check_json(owner: str, name: str, value: Any) -> None:
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise RefError(f"{owner}.{name} must hold JSON values only ({exc}); convert numpy "
                       "values with .item() / .tolist().") from None


def _require_str(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise RefError(f"{owner}.{name} must be a non-empty string, got {value!r}.")


@dataclass
class DatasetRef(_Ref):
    """A materialised data set: a directory of Parquet files (or a single file).

    Attributes:
        uri: Local absolute path or ``s3://`` URI of the data.
        format: ``"parquet"`` (what ingest and split write) or ``"csv"``.
        num_rows: Row count.
        schema: Column name → Arrow type name, in column order.
        fingerprint: SHA-256 of the content (column names, types and every row in
            order): equal data gives an equal fingerprint wherever it is stored.
        name: A short human name (``digits``, ``digits-train``).
        metadata: Free-form JSON (source, split parameters, label column …).
    """

    uri: str
    format: str
    num_rows: int
    schema: Dict[str, str]
    fingerprint: str
    name: str = ""
    metadata: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_str("DatasetRef", "uri", self.uri)
        if self.format not in ("parquet", "csv", "json"):
            raise RefError(f"DatasetRef.format must be 'parquet', 'csv' or 'json', got "
                           f"{self.format!r}.")
        if isinstance(self.num_rows, bool) or not isinstance(self.num_rows, int) \
                or self.num_rows < 0:
            raise RefError(f"DatasetRef.num_rows must be an integer >= 0, got "
                           f"{self.num_rows!r}.")
        if not isinstance(self.schema, dict):
            raise RefError("DatasetRef.schema must be a dict of column name -> type name.")
        _require_str("DatasetRef", "fingerprint", self.fingerprint)
        _check_json("DatasetRef", "metadata", self.metadata)

    @property
    def columns(self) -> List[str]:
        return list(self.schema)


@dataclass
class CheckpointRef(_Ref):
    """A committed checkpoint of a training run, with what produced it.

    Attributes:
        uri: Where the checkpoint directory lives (no credentials, no endpoint).
        framework: The model card's framework (``torch``, ``xgboost`` …).
        metrics: The metrics reported with this checkpoint (JSON values).
        config: The training config that produced it.
        run_name: The engine run (``RunConfig(name=...)``) it belongs to.
        created_at: Unix time the reference was made.
        data_fingerprint: Fingerprint of the training data set.
        pipeline: The pipeline (``pipelines.get_pipeline``) that knows how to load it.
        run_uri: The run directory (``run_state.json`` lives there).
        storage: The pipeline storage root the run was written under.
        data_uri: The training data set (``validate`` measures drift against it).
    """

    uri: str
    framework: str
    metrics: Dict[str, Any] = field(default_factory=dict)
    config: Dict[str, Any] = field(default_factory=dict)
    run_name: str = ""
    created_at: float = 0.0
    data_fingerprint: Optional[str] = None
    pipeline: Optional[str] = None
    run_uri: Optional[str] = None
    storage: Optional[str] = None
    data_uri: Optional[str] = None

    def __post_init__(self) -> None:
        _require_str("CheckpointRef", "uri", self.uri)
        _require_str("CheckpointRef", "framework", self.framework)
        _check_json("CheckpointRef", "metrics", self.metrics)
        _check_json("CheckpointRef", "config", self.config)


@dataclass
class TuneRef(_Ref):
    """The outcome of a tuning run.

    Attributes:
        best: The best trial's checkpoint (by ``metric`` / ``mode``).
        best_config: That trial's training config.
        metric, mode: What was optimised.
        trials: One row per trial (``trial_id``, ``config/<name>`` columns, the metric,
            ``training_iteration``, ``status``, ``error``).
        experiment_uri: The experiment directory (``tuner_state.json``).
    """

    best: CheckpointRef
    best_config: Dict[str, Any]
    metric: str
    mode: str
    trials: List[Dict[str, Any]] = field(default_factory=list)
    experiment_uri: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.best, dict):
            self.best = CheckpointRef.from_dict(self.best)
        if not isinstance(self.best, CheckpointRef):
            raise RefError("TuneRef.best must be a CheckpointRef.")
        if self.mode not in ("min", "max"):
            raise RefError(f"TuneRef.mode must be 'min' or 'max', got {self.mode!r}.")
        _check_json("TuneRef", "best_config", self.best_config)
        _check_json("TuneRef", "trials", self.trials)

    @classmethod
    def _decode_field(cls, name: str, value: Any) -> Any:
        return CheckpointRef.from_dict(value) if name == "best" else value


@dataclass
class Promotion(_Ref):
    """What ``promote`` decided.

    Attributes:
        promoted: Whether the alias now points at the checkpoint.
        alias: The alias (``production``).
        pipeline: The model's pipeline.
        checkpoint: The candidate checkpoint.
        reasons: One line per gate condition (``accuracy 0.95 >= 0.9: pass``).
        pointer_uri: The alias's pointer file.
        entry_uri: This decision's entry in the alias's history.
        previous: The checkpoint the alias pointed at before (None: it was unset).
        champion_metrics: ``previous``'s metrics on the candidate's validation data,
            when the gate compared against it (None: no champion condition or none).
    """

    promoted: bool
    alias: str
    pipeline: str
    checkpoint: CheckpointRef
    reasons: List[str] = field(default_factory=list)
    pointer_uri: str = ""
    entry_uri: str = ""
    previous: Optional[CheckpointRef] = None
    champion_metrics: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        _check_json("Promotion", "champion_metrics", self.champion_metrics)
        if isinstance(self.checkpoint, dict):
            self.checkpoint = CheckpointRef.from_dict(self.checkpoint)
        if isinstance(self.previous, dict):
            self.previous = CheckpointRef.from_dict(self.previous)

    @classmethod
    def _decode_field(cls, name: str, value: Any) -> Any:
        if name in ("checkpoint", "previous") and isinstance(value, dict):
            return CheckpointRef.from_dict(value)
        return value


__all__ = ["DatasetRef", "CheckpointRef", "TuneRef", "Promotion", "RefError"]
