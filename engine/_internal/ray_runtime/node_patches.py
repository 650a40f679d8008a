"""Ray's private ``Node`` and ``services``, patched for the length of a local start: no API
server, and a raylet registration seen as soon as it happens.

Written for Ray 2.60's internals (``ray._private.node``, ``ray._private.services``,
``ray._private.state``); each patch checks :func:`written_for` first and, outside the
versions it was checked against, leaves the start to Ray.
"""

from __future__ import annotations

import contextlib
import logging
import time

from engine._internal.ray_runtime import children
from engine._internal.ray_runtime.versions import written_for

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def without_api_server():
    """Start the local instance without Ray's API server process.

    With ``include_dashboard=False`` Ray 2.60 still starts its dashboard process, loading
    only the usage-stats module, and ``ray.init()`` polls until the process has written
    its address: 1.1–1.2 s of every local start on the 2-core development VM, for a
    process the engine never talks to (without the dashboard, Ray's state API is not
    among its modules either). ``ray start --head`` (a cluster's head) starts it as Ray
    does. Anything unexpected (another Ray's internals) leaves the start to Ray."""

    def replace(original):
        def start_api_server(self, *, include_dashboard, raise_on_failure):
            if include_dashboard:  # asked for: Ray's own start
                return original(self, include_dashboard=include_dashboard,
                                raise_on_failure=raise_on_failure)
            logger.debug("Not starting Ray's API server (no dashboard asked for).")
        return start_api_server

    with _node_method_replaced("start_api_server", replace):
        yield


@contextlib.contextmanager
def _node_method_replaced(name: str, replace):
    """In this block Ray's ``Node.<name>`` is ``replace(original)``; a Ray without that
    method (other internals) is left as it is."""
    if not written_for(f"a patch of Ray's Node.{name}"):
        yield
        return
    try:
        from ray._private.node import Node

        original = getattr(Node, name)
    except (ImportError, AttributeError):
        yield
        return
    setattr(Node, name, replace(original))
    try:
        yield
    finally:
        setattr(Node, name, original)


@contextlib.contextmanager
def prompt_registration_wait(before: frozenset = frozenset()):
    """Let ``ray.init()`` see the raylet's registration as soon as it happens.

    After starting the raylet, Ray 2.60's ``Node`` asks the GCS for the node once and the
    GCS client's lookup retries only once a second: the start took 2.1 s or 3.1 s on the
    2-core development VM depending on where the registration fell in that second. Here
    the lookup first polls the GCS's node table every 50 ms, so Ray's lookup then finds
    the node at once.

    Ray fails ``ray.init()`` when the raylet has not registered in time: 30 s, plus the
    retries of its own lookup (a raylet stopped for 40 s still made it, one stopped for
    90 s did not). On a CPU-starved machine (the 2-core VM at a load average of 20, a busy
    orchestrator worker) the start can need longer, and starting again only repeats the
    same work under the same load (three starts in a row failed this way in a full test run on
    2026-11-29). So past 30 s the poll goes on, up to ``_REGISTRATION_WAIT_ALIVE_S``,
    for as long as the raylet this start launched (a child of this process not in
    ``before``) is running; Ray's lookup runs once it ends, and fails as before when the
    node never came. Anything unexpected (another Ray's internals) leaves the wait to
    Ray."""
    if not written_for("the prompt wait for the raylet's registration"):
        yield
        return
    try:
        import ray._private.services as services
        from ray._private.state import GlobalState

        original = services.get_node
        client_options = services._get_gcs_client_options
    except (ImportError, AttributeError):
        yield
        return

    def get_node(gcs_address, node_id):
        state = GlobalState()
        try:
            state._initialize_global_state(client_options(gcs_address))
            start = time.monotonic()
            check_raylet_at, warned = start + _REGISTRATION_WAIT_S, False
            while not any(n.get("NodeID") == node_id for n in state.node_table()):
                now = time.monotonic()
                if now - start >= _REGISTRATION_WAIT_ALIVE_S:
                    break
                if now >= check_raylet_at:
                    if not _raylet_alive(before):
                        break
                    if not warned:
                        warned = True
                        logger.warning(
                            "Ray's raylet has not registered within %.0f s (a busy "
                            "machine?); waiting on while it runs, up to %.0f s in all.",
                            _REGISTRATION_WAIT_S, _REGISTRATION_WAIT_ALIVE_S)
                    check_raylet_at = now + 1.0
                time.sleep(0.05)
        except Exception as exc:  # noqa: BLE001 - Ray's own lookup still runs below
            logger.debug("Polling the GCS for the raylet's registration failed: %s", exc)
        finally:
            with contextlib.suppress(Exception):
                state.disconnect()
        return original(gcs_address, node_id)

    services.get_node = get_node
    try:
        yield
    finally:
        services.get_node = original


# Ray's own limit on the raylet's registration (ray/_private/node.py; its lookup then
# retries for a while), and how long the engine polls in all while the raylet runs
# (see prompt_registration_wait).
_REGISTRATION_WAIT_S = 30.0
_REGISTRATION_WAIT_ALIVE_S = 180.0


def _raylet_alive(before: frozenset) -> bool:
    """Whether a raylet this process started, and not among ``before``, still runs."""
    import psutil  # Ray's own copy (ray/thirdparty_files) when not installed

    for child in children.children_since(before):
        with contextlib.suppress(psutil.Error):
            if child.name() == "raylet" and child.status() != psutil.STATUS_ZOMBIE:
                return True
    return False
