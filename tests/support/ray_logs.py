"""What this process's Ray session wrote to its log files (for tests that grep for leaks)."""

from __future__ import annotations

import os


def ray_log_text() -> str:
    """Every file under the current Ray session's logs directory, as one text."""
    import ray

    logs = ray._private.worker._global_node.get_logs_dir_path()
    chunks = []
    for root, _dirs, files in os.walk(logs):
        for name in files:
            try:
                with open(os.path.join(root, name), "rb") as f:
                    chunks.append(f.read().decode("utf-8", "replace"))
            except OSError:
                pass
    return "\n".join(chunks)
