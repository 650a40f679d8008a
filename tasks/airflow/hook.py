"""The Airflow side of trainyard's connections: the webhook the notifiers post to, the
Ray job server (``execution="ray_job"``), a database to ingest from, and the storage URIs
that XCom holds without their credentials.

Like a provider's hook: every ``Connection.get`` of trainyard is here, and no task logic.
"""

from __future__ import annotations

import os
from typing import Optional

from airflow.sdk import get_current_context
from airflow.sdk.exceptions import AirflowFailException

from engine import constants

#: The Airflow connection the notifiers post to (its URL: ``http(s)://host:port/path``).
WEBHOOK_CONN_ENV_VAR = constants.AIRFLOW_WEBHOOK_CONN_ENV_VAR
DEFAULT_WEBHOOK_CONN_ID = constants.SETTINGS[WEBHOOK_CONN_ENV_VAR].default
#: The Airflow connection of the Ray job server (execution="ray_job").
RAY_CONN_ID_ENV_VAR = constants.RAY_CONN_ID_ENV_VAR
DEFAULT_RAY_CONN_ID = "trainyard_ray"


def webhook_url(conn_id: str) -> Optional[str]:
    """The URL of connection ``conn_id`` (its ``extra`` ``{"url": ...}`` or its URI), or
    None when there is no such connection."""
    from airflow.sdk import Connection

    try:
        conn = Connection.get(conn_id)
    except Exception:  # AirflowNotFoundException and the like: not configured
        return None
    url = (conn.extra_dejson or {}).get("url")
    if url:
        return url
    scheme = conn.conn_type if conn.conn_type in ("http", "https") else "http"
    host = conn.host or ""
    if "://" in host:
        return host
    port = f":{conn.port}" if conn.port else ""
    path = f"/{conn.schema}" if conn.schema else ""
    return f"{scheme}://{host}{port}{path}"


def xcom_uri(uri: Optional[str]) -> Optional[str]:
    """``uri`` as it may go into XCom: without credentials or an endpoint query (XCom is
    stored in the metadata database and shown in the UI). Tasks that receive it get the
    full URI back from :func:`full_uri`."""
    from engine.storage import redact

    return redact(uri) if isinstance(uri, str) else uri


def full_uri(uri: Optional[str]) -> Optional[str]:
    """The URI to open for one that came through XCom (:func:`xcom_uri`): when it is, or
    is under, the DAG run's ``storage``/``output`` param or ``$TRAINYARD_STORAGE_PATH``,
    that one with its credentials and endpoint; otherwise ``uri`` as it is."""
    from engine import constants
    from engine.storage import redact
    from tasks.layout import sub

    if not isinstance(uri, str) or "://" not in uri or "?" in uri or "@" in uri:
        return uri
    try:
        params = dict(get_current_context().get("params") or {})
    except Exception:  # called outside a running task
        params = {}
    candidates = [params.get("storage"), params.get("output"),
                  constants.given(constants.STORAGE_PATH_ENV_VAR)]
    for full in candidates:
        if not isinstance(full, str) or "://" not in full:
            continue
        shown = redact(full).rstrip("/")
        if uri.rstrip("/") == shown:
            return full
        if uri.startswith(shown + "/"):
            return sub(full, uri[len(shown) + 1:])
    return uri


def ray_conn_id() -> str:
    """The Airflow connection of the Ray job server: ``$TRAINYARD_RAY_CONN_ID``, default
    ``trainyard_ray``."""
    return constants.get(RAY_CONN_ID_ENV_VAR) or DEFAULT_RAY_CONN_ID


def ray_job_address() -> Optional[str]:
    """The job server from the Airflow connection :func:`ray_conn_id` (conn type ``ray``
    or ``http``, host and port of the dashboard, the cluster's token as its password),
    or None when there is no such connection."""
    from airflow.sdk import Connection

    try:
        conn = Connection.get(ray_conn_id())
    except Exception:  # AirflowNotFoundException: use the environment variables
        return None
    return _address_of(conn)


def ray_job_token() -> Optional[str]:
    """The Ray cluster's token: the password of the connection :func:`ray_conn_id`
    (None without one: Ray's own token sources are read then)."""
    from airflow.sdk import Connection

    try:
        return Connection.get(ray_conn_id()).password or None
    except Exception:  # AirflowNotFoundException
        return None


async def aray_job_token(conn_id: str) -> Optional[str]:
    """:func:`ray_job_token` for a trigger (the triggerer's event loop)."""
    from airflow.sdk.bases.hook import BaseHook

    try:
        return (await BaseHook.aget_connection(conn_id)).password or None
    except Exception:  # AirflowNotFoundException
        return None


def _address_of(conn) -> str:
    host = conn.host or ""
    if "://" not in host:
        scheme = "https" if (conn.conn_type == "https" or conn.schema == "https") else "http"
        host = f"{scheme}://{host}"
    return f"{host.rstrip('/')}:{conn.port}" if conn.port else host.rstrip("/")


def connection_source(conn_id: str, table: Optional[str], sql: Optional[str]) -> tuple:
    """``(source, connection)`` of ``ingest`` for an Airflow connection."""
    from airflow.sdk import Connection

    from engine.exceptions import ConfigError
    from tasks.sources.sql import with_table

    url = Connection.get(conn_id).get_uri()
    if sql is not None:
        return None, url
    if not table:
        raise AirflowFailException(f"ingest_task(conn_id={conn_id!r}) needs table=... or "
                                   "sql=...")
    try:
        return with_table(url, table), None
    except ConfigError as exc:
        raise AirflowFailException(f"Airflow connection {conn_id!r}: {exc}") from None
