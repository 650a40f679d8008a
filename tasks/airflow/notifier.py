"""The DAGs' webhook notifier: a task that failed for good, a candidate the gate turned
down. It posts through trainyard's one webhook client (``tasks.notify``) to the URL of
an Airflow connection (``tasks.airflow.hook``), and never fails a task.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from airflow.sdk import BaseNotifier

from engine import constants
from tasks.airflow.hook import DEFAULT_WEBHOOK_CONN_ID, WEBHOOK_CONN_ENV_VAR, webhook_url
from tasks.notify import post_json

logger = logging.getLogger("tasks.airflow")

#: The XCom key under which ``promote_task`` keeps a rejection's gate reasons.
REJECTION_XCOM_KEY = "rejection"


def failure_notifier() -> "WebhookNotifier":
    """The DAGs' ``on_failure_callback`` (in ``default_args``: every task's, so a task
    whose retries are spent posts once)."""
    return WebhookNotifier(event="failed")


def rejection_notifier() -> "WebhookNotifier":
    """``promote_task``'s ``on_skipped_callback``: posts the gate's reasons."""
    return WebhookNotifier(event="rejected")


class WebhookNotifier(BaseNotifier):
    """Posts a JSON message to the URL of an Airflow connection, and logs it.

    ``event="failed"`` for ``on_failure_callback`` (a task failed for good: its retries
    are spent), ``event="rejected"`` for ``promote_task``'s ``on_skipped_callback`` (the
    candidate failed the gate; the message carries the gate's reasons). The connection
    is ``conn_id``, by default ``$TRAINYARD_AIRFLOW_WEBHOOK_CONN_ID`` or
    ``trainyard_webhook`` (e.g. ``AIRFLOW_CONN_TRAINYARD_WEBHOOK=https://hooks.example/
    x``); none configured, the message is only logged. A webhook that is down or answers
    an error is logged as a warning: a notification never fails the pipeline.

    The JSON body: ``event``, ``dag_id``, ``run_id``, ``task_id``, ``try_number``,
    ``message`` (``error`` for failures, ``reasons`` and ``checkpoint_uri`` for
    rejections).
    """

    template_fields = ("conn_id",)

    def __init__(self, event: str = "failed", conn_id: Optional[str] = None,
                 timeout_s: float = 10.0) -> None:
        super().__init__()
        if event not in ("failed", "rejected"):
            raise ValueError(f"WebhookNotifier(event={event!r}): use 'failed' or 'rejected'")
        self.event, self.conn_id, self.timeout_s = event, conn_id, timeout_s

    def notify(self, context: Any) -> None:
        payload = _notification(self.event, context)
        (logger.error if self.event == "failed" else logger.warning)(
            "trainyard %s: %s", self.event, payload["message"])
        conn_id = self.conn_id or constants.get(WEBHOOK_CONN_ENV_VAR) \
            or DEFAULT_WEBHOOK_CONN_ID
        url = webhook_url(conn_id)
        if url is None:
            logger.info("No Airflow connection %r: the %s notification is only logged.",
                        conn_id, self.event)
            return
        try:
            posted = post_json(url, payload, timeout=self.timeout_s,
                               check=f"the Airflow connection {conn_id!r}")
        except Exception as exc:  # never fail (or retry) a task over its notification
            posted = False
            logger.warning("The webhook client raised %s: %s", type(exc).__name__, exc)
        if posted:
            logger.info("Posted the %s notification to connection %r.", self.event, conn_id)
        else:
            logger.warning("Could not post the %s notification to connection %r (the "
                           "webhook client logged why).", self.event, conn_id)


def _notification(event: str, context: Any) -> Dict[str, Any]:
    """The JSON message of ``event`` for the task instance in ``context``."""
    ti = context.get("ti") or context.get("task_instance")
    out: Dict[str, Any] = {
        "event": event, "dag_id": getattr(ti, "dag_id", None),
        "run_id": context.get("run_id") or getattr(ti, "run_id", None),
        "task_id": getattr(ti, "task_id", None),
        "try_number": getattr(ti, "try_number", None)}
    if event == "rejected":
        rejection = None
        try:
            rejection = ti.xcom_pull(task_ids=ti.task_id, key=REJECTION_XCOM_KEY)
        except Exception as exc:
            logger.warning("Could not read the gate's reasons from XCom: %s", exc)
        rejection = rejection or {"reasons": [str(context.get("exception") or "")]}
        out.update(rejection)
        out["message"] = (f"{out['dag_id']}: the candidate {rejection.get('checkpoint_uri')}"
                          f" failed the gate: {'; '.join(rejection['reasons'])}")
    else:
        out["error"] = str(context.get("exception") or "")
        out["message"] = (f"{out['dag_id']}.{out['task_id']} failed for good (try "
                          f"{out['try_number']}) in run {out['run_id']}: {out['error']}")
    return out
