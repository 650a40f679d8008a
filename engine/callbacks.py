"""Driver-side callbacks: hooks with no-op defaults, fed by the controller."""

from __future__ import annotations

from typing import Any, Dict, List


class Callback:
    """Subclass and override the hooks you need; each one is a no-op by default."""

    def on_run_start(self, run_name: str, config: Dict[str, Any]) -> None:
        """Before the first worker group starts."""

    def on_report(self, metrics: Dict[str, Any], all_metrics: List[Dict[str, Any]]) -> None:
        """After each round: rank 0's metrics and every rank's."""

    def on_checkpoint(self, checkpoint: Any, metrics: Dict[str, Any]) -> None:
        """After a checkpoint is committed."""

    def on_failure(self, error: BaseException) -> None:
        """When a worker fails (before the retry decision)."""

    def on_retry(self, attempt: int) -> None:
        """When the worker group is restarted after a failure."""

    def on_run_end(self, result: Any) -> None:
        """After the run finished or failed."""
