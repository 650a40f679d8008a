"""Model aliases in an MLflow model registry (``registry="mlflow:<tracking URI>"``).

A pipeline is a registered model of the same name; each checkpoint ``promote`` decides
on is one model version of it, its ``source`` the checkpoint URI, and an alias
(``production``) points at the promoted version. Tags on the version record the
decision: ``trainyard.metrics``, ``trainyard.champion_metrics``,
``trainyard.gate_reasons``, ``trainyard.data_fingerprint``, ``trainyard.engine_run``,
``trainyard.run_id``, ``trainyard.checkpoint`` (the whole ``CheckpointRef``) and, for a
version the gate turned down, ``rejected``.

A retry is safe: the version of a checkpoint is looked up by its source before one is
created, tags are set again, and the alias moves last — a promotion that failed half-way
leaves the alias where it was, and its retry ends with exactly one version.

MLflow is imported here only, and this module only when a registry names ``mlflow:``.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

from engine.exceptions import ConfigError
from tasks.registry.base import AliasMovedError, Registry, RegistryError, check_unmoved
from tasks.refs import CheckpointRef

T = TypeVar("T")
TAG = "trainyard."
REJECTED_TAG = "rejected"


class MlflowRegistry(Registry):
    """Aliases as MLflow registered-model aliases.

    Args:
        tracking_uri: The MLflow tracking URI (``http://mlflow:5000``,
            ``sqlite:////data/mlflow.db``, ``databricks``).
    """

    def __init__(self, tracking_uri: str) -> None:
        if not tracking_uri:
            raise ConfigError("registry='mlflow:' needs a tracking URI after the colon, e.g. "
                              "mlflow:http://mlflow:5000 or mlflow:sqlite:////data/mlflow.db "
                              "(promote(registry=...) or $TRAINYARD_REGISTRY).")
        self.tracking_uri = tracking_uri
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                from mlflow import MlflowClient
            except ImportError as exc:
                raise ImportError("An mlflow: registry needs MLflow: pip install "
                                  "'trainyard[tracking]'.") from exc
            self._client = MlflowClient(tracking_uri=self.tracking_uri,
                                        registry_uri=self.tracking_uri)
        return self._client

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``; any failure to talk to the registry becomes a :class:`RegistryError`."""
        try:
            return fn()
        except (ConfigError, ImportError, RegistryError):
            raise
        except Exception as exc:
            raise RegistryError(
                f"The MLflow registry at {self.tracking_uri!r} failed to {what} "
                f"({type(exc).__name__}: {exc}). Check that it is reachable (promote("
                "registry=...) or $TRAINYARD_REGISTRY); the alias did not move, and a retry "
                "promotes once.") from exc

    # --- reading --------------------------------------------------------------------------
    def current(self, pipeline: str, alias: str) -> Optional[CheckpointRef]:
        """The checkpoint of the version ``alias`` points at, or None if it is unset."""
        version = self._call(f"read alias {pipeline}@{alias}",
                             lambda: self._by_alias(pipeline, alias))
        return None if version is None else _checkpoint_of(version, pipeline)

    def _by_alias(self, pipeline: str, alias: str) -> Any:
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_model_version_by_alias(pipeline, alias)
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST" or (
                    exc.error_code == "INVALID_PARAMETER_VALUE" and "not found" in str(exc)):
                return None
            raise

    def history(self, pipeline: str, alias: str) -> List[Dict[str, Any]]:
        """The decisions for ``alias`` kept on the versions, oldest first (the latest
        decision per version)."""
        versions = self._call(f"list the versions of {pipeline!r}", lambda: list(
            self.client.search_model_versions(f"name = '{_quoted(pipeline)}'")))
        out = []
        for v in versions:
            entry = _loads(v.tags.get(f"{TAG}{alias}.decision"))
            if entry:
                out.append(dict(entry, version=v.version, source=v.source,
                                checkpoint=_checkpoint_of(v, pipeline).to_dict()))
        return sorted(out, key=lambda d: d.get("decided_at", 0))

    # --- writing --------------------------------------------------------------------------
    def record(self, record: Dict[str, Any], context: Dict[str, Any]) -> Tuple[str, str]:
        """Register the candidate (once), tag it with the decision, and move the alias
        if it passed; returns ``(models:/<name>@<alias>, models:/<name>/<version>)``."""
        name, alias = record["pipeline"], record["alias"]
        ckpt = CheckpointRef.from_dict(record["checkpoint"])
        version = self._call(f"register {ckpt.uri!r} as a version of {name!r}",
                             lambda: self._version_of(name, ckpt))
        tags = _tags(record, context)
        for key, value in tags.items():
            self._call(f"tag version {version.version} of {name!r}",
                       lambda k=key, v=value: self.client.set_model_version_tag(
                           name, version.version, k, v))
        if record["decision"] == "promoted":
            if REJECTED_TAG in (version.tags or {}):
                self._call("clear the rejected tag", lambda: self.client.
                           delete_model_version_tag(name, version.version, REJECTED_TAG))
            # MLflow has no conditional alias update: the alias is read again just
            # before it is set, which narrows a race between promoters to one request.
            now = self._call(f"read alias {name}@{alias}",
                             lambda: self._by_alias(name, alias))
            try:
                check_unmoved(record, None if now is None
                              else _checkpoint_of(now, name).uri)
            except AliasMovedError as exc:
                key = f"{TAG}{alias}.decision"
                superseded = _tags(dict(record, decision="superseded", reasons=record[
                    "reasons"] + [str(exc)]), context)[key]
                self._call(f"tag version {version.version} of {name!r}",
                           lambda: self.client.set_model_version_tag(
                               name, version.version, key, superseded))
                raise
            self._call(f"point {name}@{alias} at version {version.version}",
                       lambda: self.client.set_registered_model_alias(
                           name, alias, version.version))
        return f"models:/{name}@{alias}", f"models:/{name}/{version.version}"

    def _version_of(self, name: str, ckpt: CheckpointRef) -> Any:
        """The model version whose source is the checkpoint, created if there is none."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.create_registered_model(
                name, description=f"trainyard pipeline {name!r}: versions are checkpoints")
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        found = [v for v in self.client.search_model_versions(
            f"name = '{_quoted(name)}' and source_path = '{_quoted(ckpt.uri)}'")
            if v.source == ckpt.uri]
        if found:
            return min(found, key=lambda v: int(v.version))
        try:
            return self.client.create_model_version(
                name, ckpt.uri, tags={f"{TAG}checkpoint": json.dumps(ckpt.to_dict())},
                description=f"Checkpoint {ckpt.uri} of run {ckpt.run_name or '?'}")
        except MlflowException as exc:
            if "Invalid model version source" not in str(exc):
                raise
            # An MLflow server takes local paths only inside its own runs' artifacts.
            raise ConfigError(
                f"The MLflow server at {self.tracking_uri!r} refuses the local checkpoint "
                f"path {ckpt.uri!r} as a model version source: keep runs on storage the "
                "server and the scoring workers share (TRAINYARD_STORAGE_PATH=s3://...), or "
                "use a database tracking URI (mlflow:sqlite:///...).") from exc


def _tags(record: Dict[str, Any], context: Dict[str, Any]) -> Dict[str, str]:
    """The version's tags for one decision."""
    alias = record["alias"]
    entry = {k: record[k] for k in ("decision", "decided_at", "reasons", "metrics",
                                    "champion_metrics", "gate")}
    entry["previous"] = (record.get("previous") or {}).get("uri")
    tags = {f"{TAG}checkpoint": json.dumps(record["checkpoint"]),
            f"{TAG}metrics": json.dumps(record["metrics"]),
            f"{TAG}champion_metrics": json.dumps(record.get("champion_metrics")),
            f"{TAG}gate_reasons": json.dumps(record["reasons"]),
            f"{TAG}data_fingerprint": str(context.get("data_fingerprint") or ""),
            f"{TAG}engine_run": str(context.get("engine_run") or ""),
            f"{TAG}run_id": str(context.get("run_id") or ""),
            f"{TAG}{alias}.decision": json.dumps(entry)}
    if record["decision"] == "rejected":
        tags[REJECTED_TAG] = f"{alias}: " + "; ".join(
            r for r in record["reasons"] if "FAIL" in r)
    return tags


def _checkpoint_of(version: Any, pipeline: str) -> CheckpointRef:
    """The ``CheckpointRef`` a version records; one rebuilt from its source if a tool
    other than trainyard registered it."""
    data = _loads((version.tags or {}).get(f"{TAG}checkpoint"))
    if data and data.get("uri") == version.source:
        return CheckpointRef.from_dict(data)
    return CheckpointRef(uri=version.source, framework=(version.tags or {}).get(
        f"{TAG}framework", "unknown"), pipeline=pipeline)


def _loads(text: Optional[str]) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _quoted(value: str) -> str:
    """A value inside single quotes of an MLflow filter string."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


__all__ = ["MlflowRegistry"]
