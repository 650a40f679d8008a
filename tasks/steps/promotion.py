"""The promotion step: point an alias at a checkpoint if its metrics pass a gate.

The registry (``tasks.registry``) records the decision and owns every question about
aliases; this step adds what needs the other steps: the champion's metrics on the
candidate's data, evaluated now if no earlier evaluation is kept.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Optional

from engine.exceptions import ConfigError
from engine.storage import Storage
from tasks import layout
from tasks.refs import CheckpointRef, DatasetRef, Promotion
from tasks.registry import gates
from tasks.registry.base import AliasMovedError, check_alias
from tasks.registry.factory import open_registry
from tasks.steps.data import DatasetLike
from tasks.steps.prediction import CheckpointLike, evaluation_dir, evaluate

logger = logging.getLogger("tasks")
# Decisions made before giving up when other promoters keep moving the alias meanwhile.
_DECISIONS = 3


def promote(checkpoint: CheckpointLike, metrics: Mapping[str, Any],
            alias: str = "production", gate: Optional[Mapping[str, Any]] = None, *,
            registry: Optional[str] = None, dataset: Optional[DatasetLike] = None,
            run_id: Optional[str] = None) -> Promotion:
    """Point ``alias`` at ``checkpoint`` if its metrics pass ``gate``.

    Args:
        checkpoint: The candidate (what :func:`train` returned).
        metrics: What :func:`evaluate` returned for it.
        alias: ``production``, ``staging`` … (lower-case letters, digits, ``_``, ``-``).
        gate: ``{"accuracy": [">=0.9", ">=champion"], "log_loss": "<=champion-0.01"}``;
            every condition must hold. ``champion`` is the model the alias points at
            now, evaluated on ``dataset`` (cached per checkpoint and data fingerprint);
            with no champion yet, its conditions pass. None: the pipeline's default
            gate; ``{}``: no gate.
        registry: Where aliases live: a path/URI for pointer files, or
            ``mlflow:<tracking URI>`` for an MLflow model registry; default
            ``$TRAINYARD_REGISTRY``, else ``<checkpoint's storage>/models``.
        dataset: The validation data ``metrics`` were computed on; needed by a champion
            condition unless the champion was evaluated on it before.
        run_id: The orchestrator's run id, recorded with the decision.

    Returns:
        A :class:`Promotion`. A failed gate leaves the alias as it was; every decision
        is kept in the alias's history, with the champion's metrics beside the
        candidate's.

    Raises:
        ConfigError: a malformed gate (before anything is evaluated), a gate metric that
            ``metrics`` lacks, metrics of another checkpoint or data set, or a champion
            condition with no ``dataset`` to evaluate the champion on.
        RegistryError: the registry could not be reached; the alias did not move, and
            a retry promotes once. (``AliasMovedError``: other promoters moved the alias
            during each of three decisions; it points at one of theirs.)

    A decision moves the alias only if it still points at the champion the gate judged
    against (another promoter may have moved it meanwhile); if it moved, the decision
    is kept as ``superseded`` and taken again against the new champion.
    """
    from pipelines import get_pipeline

    ckpt = CheckpointRef.from_dict(checkpoint)
    check_alias(alias)
    metrics = _checked_metrics(ckpt, metrics, dataset)
    if gate is None and ckpt.pipeline:
        gate = get_pipeline(ckpt.pipeline).gate
    gate = dict(gate or {})
    conditions = gates.parse_gate(gate)
    reg = open_registry(registry, ckpt.storage)
    pipeline = ckpt.pipeline or ckpt.framework
    context = {"engine_run": ckpt.run_name, "run_id": run_id,
               "data_fingerprint": metrics.get("dataset_fingerprint")}
    for attempt in range(_DECISIONS):
        previous = reg.current(pipeline, alias)
        champion = None
        if previous is not None and gates.has_champion_condition(conditions):
            champion = _champion_metrics(previous, metrics, dataset)
        try:  # the alias moves only if it still points at ``previous``
            decision = gates.decide(ckpt, metrics, alias, gate, reg, previous, champion,
                                    context)
            break
        except AliasMovedError as exc:
            if attempt + 1 == _DECISIONS:
                raise
            logger.warning("%s Deciding again.", exc)
    logger.info("%s %s as %s/%s: %s", "Promoted" if decision.promoted else "Did not promote",
                ckpt.uri, decision.pipeline, alias, "; ".join(decision.reasons) or "no gate")
    return decision


def _checked_metrics(ckpt: CheckpointRef, metrics: Any,
                     dataset: Optional[DatasetLike]) -> Dict[str, Any]:
    """``metrics`` as a dict, once they are known to be ``ckpt``'s on ``dataset``."""
    if not isinstance(metrics, Mapping):
        raise ConfigError("promote(metrics=...) takes the dict that evaluate() returned.")
    evaluated = metrics.get("checkpoint_uri")
    if evaluated is not None and evaluated != ckpt.uri:
        raise ConfigError(f"These metrics are of checkpoint {evaluated!r}, not of "
                          f"{ckpt.uri!r}: evaluate the checkpoint you promote.")
    fingerprint = metrics.get("dataset_fingerprint")
    if dataset is not None and fingerprint is not None \
            and DatasetRef.from_dict(dataset).fingerprint != fingerprint:
        raise ConfigError("promote(dataset=...) is not the data these metrics were computed "
                          "on: pass the data set you evaluated the candidate on.")
    return dict(metrics)


def _champion_metrics(champion: CheckpointRef, metrics: Dict[str, Any],
                      dataset: Optional[DatasetLike]) -> Dict[str, Any]:
    """The champion's metrics on the candidate's data: from an earlier evaluation of the
    same checkpoint on the same data if there is one, else evaluated now (and kept)."""
    fingerprint = metrics.get("dataset_fingerprint") or (
        DatasetRef.from_dict(dataset).fingerprint if dataset is not None else None)
    if fingerprint:
        st = Storage.from_path(layout.sub(evaluation_dir(champion, fingerprint),
                                          "metrics.json"))
        cached = st.read_json(st.root)
        if cached and cached.get("checkpoint_uri") == champion.uri \
                and cached.get("dataset_fingerprint") == fingerprint:
            return cached
    if dataset is None:
        raise ConfigError(f"The gate compares against the champion ({champion.uri}), which "
                          "has not been evaluated on this data: pass promote(dataset=...) "
                          "— the validation data the candidate was evaluated on.")
    logger.info("Evaluating the champion %s on the candidate's data.", champion.uri)
    return evaluate(champion, dataset)


__all__ = ["promote"]
