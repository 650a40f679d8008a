"""What the Prefect tasks tell the world: the promotion events (a deployment trigger on
``trainyard.model.promoted`` starts scoring) and the webhook notifications of a rejected
candidate or a failed flow run (``tasks.notify``: logged, never raised).
"""

from __future__ import annotations

from typing import Any, Mapping

from tasks.refs import Promotion


#: The events ``promote_task`` emits; a deployment trigger on the first starts scoring.
PROMOTED_EVENT = "trainyard.model.promoted"
REJECTED_EVENT = "trainyard.model.rejected"


def model_resource_id(pipeline: str, alias: str) -> str:
    """The Prefect resource id of a pipeline's alias: ``trainyard.model.<pipeline>.<alias>``."""
    return f"trainyard.model.{pipeline}.{alias}"


def emit_decision_event(decision: Promotion, metrics: Mapping[str, Any]) -> Any:
    """Emit ``trainyard.model.promoted`` or ``.rejected`` for the alias's resource, with
    the checkpoint, metrics, gate reasons and previous model in the payload. A failure to
    emit is logged, never raised: the decision is already recorded."""
    import logging

    from prefect.events import emit_event

    from tasks.registry.gates import scalar_metrics

    payload = {"checkpoint_uri": decision.checkpoint.uri,
               "checkpoint": decision.checkpoint.to_dict(),
               "storage": decision.checkpoint.storage, "pipeline": decision.pipeline,
               "alias": decision.alias, "metrics": scalar_metrics(dict(metrics)),
               "champion_metrics": decision.champion_metrics, "reasons": decision.reasons,
               "previous": decision.previous.uri if decision.previous else None,
               "pointer_uri": decision.pointer_uri}
    try:
        return emit_event(
            event=PROMOTED_EVENT if decision.promoted else REJECTED_EVENT,
            resource={"prefect.resource.id": model_resource_id(decision.pipeline,
                                                               decision.alias),
                      "prefect.resource.name": f"{decision.pipeline}/{decision.alias}",
                      "trainyard.pipeline": decision.pipeline,
                      "trainyard.alias": decision.alias},
            payload=payload)
    except Exception as exc:  # noqa: BLE001 - an event is a notification, not the decision
        logging.getLogger("tasks").warning("Could not emit the %s event: %s", decision.alias, exc)
        return None


def notify_rejection(decision: Promotion, metrics: Mapping[str, Any]) -> bool:
    """POST ``{"event": "trainyard.model.rejected", ...}`` to ``$TRAINYARD_NOTIFY_WEBHOOK``
    (if set): the gate's reasons, the metrics, the model the alias still points at. A
    webhook that is down is logged; the task goes on."""
    from prefect.runtime import flow_run

    from tasks.registry.gates import scalar_metrics
    from tasks.notify import notify

    return notify({"event": REJECTED_EVENT, "pipeline": decision.pipeline,
                   "alias": decision.alias, "checkpoint_uri": decision.checkpoint.uri,
                   "reasons": decision.reasons, "metrics": scalar_metrics(dict(metrics)),
                   "previous": decision.previous.uri if decision.previous else None,
                   "flow_run_id": flow_run.id, "flow_run_name": flow_run.name})


def notify_flow_failure(flow: Any, flow_run: Any, state: Any) -> None:
    """Flow ``on_failure`` (and ``on_crashed``) hook: POST ``{"event":
    "trainyard.flow_run.failed", ...}`` with the flow, the run, its parameters and the
    state's message to ``$TRAINYARD_NOTIFY_WEBHOOK`` (if set). Never raises."""
    from tasks.notify import notify

    notify({"event": FLOW_FAILED_EVENT, "flow": flow.name, "flow_run_id": str(flow_run.id),
            "flow_run_name": flow_run.name, "deployment_id": str(flow_run.deployment_id or ""),
            "parameters": flow_run.parameters, "state": state.name,
            "message": state.message})


#: What a failure notification's ``event`` says (rejections: ``REJECTED_EVENT``).
FLOW_FAILED_EVENT = "trainyard.flow_run.failed"
