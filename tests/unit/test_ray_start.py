"""How the engine starts its local Ray, without starting one: Ray's API server (the
dashboard head) is left out unless asked for (the real start is checked in
tests/integration/test_trainer_basics.py)."""

from __future__ import annotations

from unittest import mock

import pytest

pytest.importorskip("ray")

from ray._private.node import Node  # noqa: E402

from engine import constants  # noqa: E402
from engine._internal.ray_utils import _without_api_server  # noqa: E402


@pytest.fixture
def ray_api_server(monkeypatch):
    start = mock.Mock(name="Node.start_api_server")
    monkeypatch.setattr(Node, "start_api_server", start)
    return start


def test_the_api_server_is_skipped_while_the_engine_starts_ray(ray_api_server, monkeypatch):
    monkeypatch.delenv(constants.RAY_STATE_API_ENV_VAR, raising=False)
    with _without_api_server():
        Node.start_api_server(object(), include_dashboard=False, raise_on_failure=False)
        Node.start_api_server(object(), include_dashboard=None, raise_on_failure=False)
        ray_api_server.assert_not_called()
        Node.start_api_server(object(), include_dashboard=True, raise_on_failure=True)
        assert ray_api_server.call_count == 1  # an explicit dashboard keeps its server
    assert Node.start_api_server is ray_api_server  # Ray's own again afterwards


def test_the_state_api_setting_keeps_it(ray_api_server, monkeypatch):
    monkeypatch.setenv(constants.RAY_STATE_API_ENV_VAR, "1")
    with _without_api_server():
        assert Node.start_api_server is ray_api_server
