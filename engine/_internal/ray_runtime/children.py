"""This process's child processes: which Ray started, and stopping what a failed local
start left behind (psutil; no Ray API)."""

from __future__ import annotations

import os


def child_pids() -> set:
    import psutil  # Ray's own copy (ray/thirdparty_files) when not installed

    try:
        return {p.pid for p in psutil.Process().children()}
    except psutil.Error:
        return set()


def children_since(before) -> list:
    """This process's children (psutil processes) whose pids are not in ``before``."""
    import psutil  # Ray's own copy (ray/thirdparty_files) when not installed

    try:
        return [c for c in psutil.Process().children() if c.pid not in before]
    except psutil.Error:
        return []


def stop_ray_children(before: set) -> int:
    """SIGKILL the Ray processes a failed local start left behind: this process's
    children started since ``before`` that are Ray's (its GCS and raylet binaries, or
    Python running Ray's own modules), with their children (agents, workers). The
    reaper Ray starts beside them is kept: it only acts when this process exits."""
    import psutil  # Ray's own copy (ray/thirdparty_files) when not installed

    victims = []
    for child in children_since(before):
        try:
            cmdline = " ".join(child.cmdline())
            if "ray_process_reaper" in cmdline:
                continue
            if child.name() in ("gcs_server", "raylet") or f"{os.sep}ray{os.sep}" in cmdline:
                victims += [child] + child.children(recursive=True)
        except psutil.Error:
            continue
    for proc in victims:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(victims, timeout=10)
    return len(victims)
