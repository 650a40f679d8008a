"""The Prefect events ``promote_task`` emits (Prefect's asserting events client, no server)."""

from __future__ import annotations

import pytest

pytest.importorskip("prefect")

from tasks.prefect import (PROMOTED_EVENT, REJECTED_EVENT,  # noqa: E402
                           emit_decision_event)
from tasks.refs import CheckpointRef, Promotion  # noqa: E402


@pytest.fixture
def asserting_events_worker(monkeypatch):
    """Prefect's events worker with its asserting client, which keeps what it is sent
    (as ``prefect.testing.fixtures`` has it, without that module's test server)."""
    from prefect.events.clients import AssertingEventsClient
    from prefect.events.worker import EventsWorker

    worker = EventsWorker.instance(AssertingEventsClient)
    monkeypatch.setattr(EventsWorker, "instance", lambda *_: worker)
    try:
        yield worker
    finally:
        worker.drain()


@pytest.fixture(autouse=True)
def _no_server():
    """An API URL nothing listens on: events go to the asserting client, and no
    ephemeral Prefect server starts for them."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        yield


def _decision(promoted: bool) -> Promotion:
    new = CheckpointRef(uri="/ty/runs/r2/checkpoint_000004", framework="torch",
                        pipeline="digits", storage="/ty")
    old = CheckpointRef(uri="/ty/runs/r1/checkpoint_000004", framework="torch",
                        pipeline="digits", storage="/ty")
    reasons = ["accuracy 0.93 >= 0.9: pass",
               f"accuracy 0.93 >= champion: {'pass' if promoted else 'FAIL'} (champion 0.95)"]
    return Promotion(promoted=promoted, alias="production", pipeline="digits",
                     checkpoint=new, reasons=reasons, previous=old,
                     champion_metrics={"accuracy": 0.95})


@pytest.mark.parametrize("promoted", [True, False])
def test_a_decision_is_an_event_on_the_models_alias(asserting_events_worker, promoted):
    metrics = {"accuracy": 0.93, "confusion_matrix": [[1, 0], [0, 1]]}
    emit_decision_event(_decision(promoted), metrics)
    asserting_events_worker.drain()
    [event] = asserting_events_worker._client.events
    assert event.event == (PROMOTED_EVENT if promoted else REJECTED_EVENT)
    assert event.resource.id == "trainyard.model.digits.production"
    assert event.payload["checkpoint_uri"] == "/ty/runs/r2/checkpoint_000004"
    assert event.payload["previous"] == "/ty/runs/r1/checkpoint_000004"
    assert event.payload["metrics"] == {"accuracy": 0.93}  # scalars only
    assert event.payload["champion_metrics"] == {"accuracy": 0.95}
    assert event.payload["reasons"][1].startswith("accuracy 0.93 >= champion")
    assert event.payload["storage"] == "/ty"


def test_an_event_that_cannot_be_sent_does_not_fail_the_promotion(monkeypatch, caplog):
    import prefect.events

    def down(**kwargs):
        raise ConnectionError("events endpoint down")

    monkeypatch.setattr(prefect.events, "emit_event", down)
    assert emit_decision_event(_decision(True), {"accuracy": 0.93}) is None
    assert "Could not emit" in caplog.text
