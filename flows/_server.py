"""Which Prefect API a flow run from the command line talks to, and its start-up.

``python -m flows.retrain`` (``make run``) needs a Prefect API. In order:

1. ``PREFECT_API_URL`` (environment or Prefect profile) names one: that server, as
   Prefect itself would.
2. A server ``prefect server start --background`` left running (Prefect's PID file in
   ``PREFECT_HOME``, answering ``/api/health`` at ``PREFECT_SERVER_API_HOST:PORT``): that
   one, so the run skips starting a temporary server (seconds on a small machine). It
   uses the same database (``PREFECT_HOME``'s by default) the temporary server would.
3. ``TRAINYARD_PREFECT_SERVER=background``: start that background server first (Prefect's
   own ``prefect server start --background``), so that later runs find it (2.). It keeps
   running after the flow: ``prefect server stop`` stops it.
4. Otherwise Prefect's temporary server, started for this run and stopped at its end
   (the default), with :func:`patient_ephemeral_server`'s settings.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

from engine import constants
from engine.constants import PREFECT_SERVER_ENV_VAR as SERVER_ENV_VAR


@contextlib.contextmanager
def prefect_api(start_timeout_s: int = 120) -> Iterator[None]:
    """The Prefect API of a command-line flow run (the module's docstring says which)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value():
        yield
        return
    mode = constants.get(SERVER_ENV_VAR)  # SettingError unless background or temporary
    url = background_server_url()
    if url is None and mode == "background":
        url = start_background_server(start_timeout_s)
    if url is None:
        with patient_ephemeral_server(start_timeout_s):
            yield
        return
    print(f"Using the Prefect server at {url} (`prefect server stop` stops it).",
          file=sys.stderr)
    with temporary_settings(updates={PREFECT_API_URL: url}):
        yield


def background_server_url() -> Optional[str]:
    """The API URL of a healthy server that ``prefect server start --background`` runs,
    or None."""
    from prefect.settings import (PREFECT_HOME, PREFECT_SERVER_API_HOST,
                                  PREFECT_SERVER_API_PORT)

    pid_file = Path(PREFECT_HOME.value()) / "server.pid"
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except (OSError, ValueError):  # no PID file, a stale one, or not ours to signal
        return None
    host = PREFECT_SERVER_API_HOST.value()
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    url = f"http://{host}:{PREFECT_SERVER_API_PORT.value()}/api"
    return url if _healthy(url) else None


def start_background_server(timeout_s: float) -> str:
    """``prefect server start --background``, then wait until it answers."""
    from prefect.settings import PREFECT_SERVER_ANALYTICS_ENABLED

    env = dict(os.environ)
    env.setdefault(PREFECT_SERVER_ANALYTICS_ENABLED.name, "false")
    print("Starting a background Prefect server for this and later runs "
          "(`prefect server stop` stops it).", file=sys.stderr)
    proc = subprocess.run([sys.executable, "-m", "prefect", "server", "start",
                           "--background"], env=env, capture_output=True, text=True,
                          timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        url = background_server_url()
        if url is not None:
            return url
        time.sleep(0.2)
    raise RuntimeError(
        f"`prefect server start --background` did not answer within {timeout_s:.0f} s "
        f"(exit code {proc.returncode}): {(proc.stdout + proc.stderr).strip()[-500:]} "
        f"Unset ${SERVER_ENV_VAR} to use a temporary server instead.")


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def patient_ephemeral_server(timeout_s: int = 120) -> Iterator[None]:
    """Settings for Prefect's ephemeral server (started when no ``PREFECT_API_URL`` is
    set): more than its default 20 s to start (a busy 2-core machine needs it), and no
    telemetry (it logs an error on a machine without internet access). Settings given in
    the environment win."""
    from prefect.settings import (PREFECT_SERVER_ANALYTICS_ENABLED,
                                  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
                                  temporary_settings)

    updates = {setting: value for setting, value in (
        (PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, timeout_s),
        (PREFECT_SERVER_ANALYTICS_ENABLED, False)) if setting.name not in os.environ}
    with temporary_settings(updates=updates):
        yield
