"""The Airflow trigger that waits for a pipeline step's Ray job (``execution="ray_job"``).

A train, tune, evaluate or batch-predict task in ``ray_job`` mode submits its job (or
finds it again, after a retry) and defers to :class:`RayJobTrigger`: the task gives its
worker slot back while the triggerer polls the job's status and tails its log into the
task's log. When the job ends, the trigger fires once with ``{"submission_id", "status"}``
and the task resumes to read the step's reference back from storage.

Stopping the job is tied to a user's action only (``on_kill``: marking the deferred task
failed or success, clearing it): a triggerer restart or redistribution cancels the
trigger without stopping the job, and the trigger re-attaches to it where it runs next.
The triggerer must be running (``airflow triggerer``) for deferred tasks to resume.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Dict, Optional, Tuple

from airflow.triggers.base import BaseTrigger, TriggerEvent

_TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class RayJobTrigger(BaseTrigger):
    """Fires when the Ray job ``submission_id`` at ``address`` reaches a terminal state.

    Args:
        address: The job server (``http://<head>:8265``).
        submission_id: The job.
        poll_s: Longest seconds between status polls (they start at 0.1 s).
        conn_id: The Airflow connection whose password is the cluster's token, read
            in the triggerer (the trigger's arguments are stored in the metadata
            database: a token never is); None or no password: Ray's own token sources.
    """

    def __init__(self, address: str, submission_id: str, poll_s: float = 2.0,
                 conn_id: Optional[str] = None) -> None:
        super().__init__()
        self.address = address
        self.submission_id = submission_id
        self.poll_s = float(poll_s)
        self.conn_id = conn_id

    def serialize(self) -> Tuple[str, Dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__name__}",
                {"address": self.address, "submission_id": self.submission_id,
                 "poll_s": self.poll_s, "conn_id": self.conn_id})

    async def _client(self) -> Any:
        from tasks import ray_jobs
        from tasks.airflow.hook import aray_job_token

        token = await aray_job_token(self.conn_id) if self.conn_id else None
        return await asyncio.to_thread(ray_jobs.connect, self.address, token)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from tasks import ray_jobs

        client = await self._client()
        self.log.info("Waiting for Ray job %s at %s.", self.submission_id, self.address)
        tail = asyncio.ensure_future(self._tail(client))
        try:
            # From 0.1 s up to poll_s: a short job's end is seen at once.
            for interval in ray_jobs.poll_intervals(self.poll_s):
                status = str(await asyncio.to_thread(client.get_job_status,
                                                     self.submission_id))
                if status in _TERMINAL:
                    break
                await asyncio.sleep(interval)
            try:  # the log socket closes at the job's end: let it drain
                await asyncio.wait_for(asyncio.shield(tail), timeout=5)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                pass
        finally:
            tail.cancel()
        self.log.info("Ray job %s ended %s.", self.submission_id, status)
        yield TriggerEvent({"submission_id": self.submission_id, "status": status})

    async def _tail(self, client: Any) -> None:
        from tasks import ray_jobs

        tail = ray_jobs.LogTail(client, self.submission_id, self.log.info)
        try:
            async for chunk in client.tail_job_logs(self.submission_id):
                tail.feed(chunk)
        except Exception as exc:  # noqa: BLE001 - logs are a convenience
            self.log.debug("Log tail of %s ended: %s", self.submission_id, exc)
        tail.flush()

    async def on_kill(self) -> None:
        """A user killed the deferred task: stop its job."""
        client = await self._client()
        await asyncio.to_thread(client.stop_job, self.submission_id)
        self.log.warning("Stopped Ray job %s (the task was killed).", self.submission_id)


__all__ = ["RayJobTrigger"]
