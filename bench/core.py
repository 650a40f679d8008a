"""The benchmark harness's building blocks: workloads, targets, statistics, probes.

A :class:`Workload` says how to run one repetition on trainyard (``run_ours``) and on its
anchor (``run_anchor``). Each returns a dict of metric values (plus any extra,
JSON-able information, kept beside the numbers). The runner (``bench.run``) alternates
the two sides, samples the driver's RSS while they run, and counts the Ray actors and
placement groups left alive afterwards.

Adding a row::

    from bench.core import Metric, Target, Workload, register

    register(Workload(
        name="my_workload", description="...", anchor="Ray Tune Tuner",
        run_ours=run_ours, run_anchor=run_anchor,
        metrics=[Metric("wall_s", "s", Target("ratio_max", 0.5))],
    ))

in its own ``bench/<name>.py``: ``bench.run`` imports every module of ``bench/``
except those in ``bench.run.NOT_WORKLOADS`` (helpers that register nothing go there).
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

# The child-process protocol and its JSON files live in bench._child (stdlib only, so
# anchor processes can import it); the names stay importable from here.
from bench._child import REPO, child_env, read_json, write_json  # noqa: F401


# --- targets and metrics ------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """What a metric must achieve.

    kinds: ``ratio_max`` (ours/anchor ≤ value), ``ratio_min`` (ours/anchor ≥ value, e.g.
    throughput), ``abs_max`` (ours ≤ value, in the metric's unit), ``abs_min``.
    Medians are compared.
    """

    kind: str
    value: float

    def __post_init__(self) -> None:
        if self.kind not in ("ratio_max", "ratio_min", "abs_max", "abs_min"):
            raise ValueError(f"unknown target kind {self.kind!r}")

    def text(self, unit: str) -> str:
        op = "≤" if self.kind.endswith("max") else "≥"
        if self.kind.startswith("ratio"):
            return f"ratio {op} {self.value:g}"
        return f"ours {op} {self.value:g} {unit}".rstrip()

    def check(self, ours: Optional[float], ratio: Optional[float]) -> Optional[bool]:
        value = ratio if self.kind.startswith("ratio") else ours
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None
        return value <= self.value if self.kind.endswith("max") else value >= self.value


@dataclass(frozen=True)
class Metric:
    """One measured quantity of a workload: a key in the dicts the run functions return."""

    name: str
    unit: str = ""
    target: Optional[Target] = None
    description: str = ""


@dataclass
class Context:
    """What a run function gets for one repetition."""

    quick: bool
    rep: int
    side: str                      # "ours" or "anchor"
    workdir: Path                  # a fresh directory for this repetition
    rss: "RssSampler"
    timeout_s: float
    # Wall-clock (time.time()) start and end of the last run_process call, so a workload
    # can split a whole wall with timestamps its process wrote.
    last_process_start_unix: Optional[float] = None
    last_process_end_unix: Optional[float] = None

    def run_process(self, cmd: Sequence[str], *, env: Optional[Dict[str, str]] = None,
                    cwd: Optional[Path] = None, log_name: str = "proc") -> float:
        """Run ``cmd`` to completion and return its whole wall in seconds.

        The process's RSS is what the driver-RSS probe samples while it runs (it is this
        side's driver). Its stdout/stderr go to ``workdir/<log_name>.log``; a non-zero exit
        raises with the log's tail.
        """
        log_path = self.workdir / f"{log_name}.log"
        with open(log_path, "wb") as log:
            self.last_process_start_unix = time.time()
            t0 = time.perf_counter()
            proc = subprocess.Popen(list(cmd), env=env, cwd=str(cwd or REPO), stdout=log,
                                    stderr=subprocess.STDOUT)
            self.rss.watch(proc.pid)
            try:
                rc = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"{cmd[:4]}... timed out after {self.timeout_s:.0f} s; "
                                   f"log: {log_path}")
            finally:
                self.rss.unwatch()
            wall = time.perf_counter() - t0
            self.last_process_end_unix = time.time()
        if rc != 0:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{' '.join(cmd[:6])}... exited with {rc}; log tail:\n{tail}")
        return wall


@dataclass
class Workload:
    """One benchmark row group.

    Args:
        name: Used by ``--only`` and as the key in ``latest.json``.
        description: One line for the report.
        anchor: What ours is compared with, in words.
        run_ours / run_anchor: ``f(ctx) -> {metric name: value, ...extra info}``.
        metrics: The metrics shown in the table (keys of the returned dicts).
        ray_mode: ``"warm"`` runs on the runner's local Ray (started once);
            ``"none"`` shuts it down first (the workload starts its own processes).
        setup: Called once before the first repetition (e.g. driver-side imports, so
            that import time does not land in the first repetition of one side only).
        sizes: ``f(quick) -> dict`` of the sizes used, recorded in the JSON.
        rep_timeout_s: A repetition running longer is a hang: the runner dumps all
            stacks and exits.
        in_default: False for rows that ``make bench`` skips unless named with
            ``--only`` (the large-data rows of ``bench.scaling``, minutes each).
    """

    name: str
    description: str
    anchor: str
    run_ours: Callable[[Context], Dict[str, Any]]
    run_anchor: Callable[[Context], Dict[str, Any]]
    metrics: List[Metric]
    ray_mode: str = "warm"
    setup: Optional[Callable[[bool], None]] = None
    sizes: Optional[Callable[[bool], Dict[str, Any]]] = None
    rep_timeout_s: float = 600.0
    notes: List[str] = field(default_factory=list)
    in_default: bool = True


REGISTRY: Dict[str, Workload] = {}


def register(workload: Workload) -> Workload:
    if workload.ray_mode not in ("warm", "none"):
        raise ValueError(f"{workload.name}: ray_mode must be 'warm' or 'none'")
    REGISTRY[workload.name] = workload
    return workload


# --- statistics ---------------------------------------------------------------------
def summarize(values: Sequence[float]) -> Dict[str, Any]:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "values": []}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals), "values": vals}


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]), like numpy's default."""
    vals = sorted(values)
    if not vals:
        return float("nan")
    if len(vals) == 1:
        return vals[0]
    pos = (len(vals) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


# --- probes -------------------------------------------------------------------------
class RssSampler:
    """Samples the RSS of the driver: this process, or a watched subprocess (a side whose
    driver is a fresh process, e.g. torchrun's launcher or trainyard's ``python`` child).

    ``start()``/``stop()`` bracket one repetition; ``stop()`` returns the peak in bytes.
    """

    def __init__(self, interval_s: float = 0.05) -> None:
        import psutil

        self._psutil = psutil
        self.interval_s = interval_s
        self._self = psutil.Process()
        self._watched: Optional[Any] = None
        self._peak = 0
        self._peak_watched = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def watch(self, pid: int) -> None:
        try:
            self._watched = self._psutil.Process(pid)
        except self._psutil.Error:
            self._watched = None

    def unwatch(self) -> None:
        self._sample()
        self._watched = None

    def _sample(self) -> None:
        try:
            self._peak = max(self._peak, self._self.memory_info().rss)
        except self._psutil.Error:
            pass
        proc = self._watched
        if proc is not None:
            try:
                self._peak_watched = max(self._peak_watched, proc.memory_info().rss)
            except self._psutil.Error:
                pass

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> None:
        self._peak = 0
        self._peak_watched = 0
        self._stop.clear()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> Dict[str, Optional[int]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        return {"runner_peak_rss": self._peak,
                "subprocess_driver_peak_rss": self._peak_watched or None}


def runner_maxrss_bytes() -> int:
    """Lifetime peak RSS of this process (getrusage; Linux reports KiB)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return ru if sys.platform == "darwin" else ru * 1024


_STATE_API_OK: Optional[bool] = None


def count_ray_objects() -> Dict[str, Any]:
    """Actors and placement groups alive in the connected Ray, and how they were counted.

    Prefers ``ray.util.state`` (needs the dashboard's API server); without it, reads the
    GCS tables directly (``ray._private.state.actors()`` and
    ``ray.util.placement_group_table()``). Whether an API server runs is read from the
    address it publishes: with none (the engine's local Ray starts none), the state
    API's client would wait tens of seconds for a connection inside the timed process.
    """
    global _STATE_API_OK
    import ray

    if not ray.is_initialized():
        return {"method": "no Ray connected in the runner", "actors_alive": None,
                "placement_groups_alive": None, "actor_classes": {}}
    if _STATE_API_OK is None and not _api_server_published():
        _STATE_API_OK = False
    if _STATE_API_OK is not False:
        try:
            from ray.util.state import list_actors, list_placement_groups

            actors = list_actors(filters=[("state", "=", "ALIVE")], timeout=5,
                                 raise_on_missing_output=False)
            pgs = list_placement_groups(filters=[("state", "=", "CREATED")], timeout=5,
                                        raise_on_missing_output=False)
            _STATE_API_OK = True
            classes: Dict[str, int] = {}
            for a in actors:
                name = getattr(a, "class_name", None) or "?"
                classes[name] = classes.get(name, 0) + 1
            return {"method": "ray.util.state.list_actors/list_placement_groups",
                    "actors_alive": len(actors), "placement_groups_alive": len(pgs),
                    "actor_classes": classes,
                    "actor_ids": sorted(a.actor_id for a in actors),
                    "placement_group_ids": sorted(pg.placement_group_id for pg in pgs)}
        except Exception:
            _STATE_API_OK = False
    import ray._private.state as gcs_state

    classes = {}
    ids = []
    for actor_id, info in gcs_state.actors().items():
        if info.get("State") in ("ALIVE", 2):  # "ALIVE" (string form) in current Ray
            ids.append(actor_id)
            name = info.get("ActorClassName") or "?"
            classes[name] = classes.get(name, 0) + 1
    pgs = {pg_id: pg for pg_id, pg in ray.util.placement_group_table().items()
           if pg.get("state") not in ("REMOVED",)}
    return {"method": "ray._private.state.actors() + ray.util.placement_group_table() "
                      "(state API unavailable: no dashboard)",
            "actors_alive": len(ids), "placement_groups_alive": len(pgs),
            "actor_classes": classes,
            "placement_group_states": sorted({str(pg.get("state")) for pg in pgs.values()}),
            "actor_ids": sorted(ids), "placement_group_ids": sorted(pgs)}


def _api_server_published() -> bool:
    try:
        from ray._private import ray_constants
        from ray.experimental.internal_kv import _internal_kv_get

        return bool(_internal_kv_get(ray_constants.DASHBOARD_ADDRESS,
                                     namespace=ray_constants.KV_NAMESPACE_DASHBOARD))
    except Exception:  # noqa: BLE001 - unknown: let the state API try
        return True


def new_since(before: Optional[Dict[str, Any]], after: Dict[str, Any]) -> Dict[str, Any]:
    """Actors / placement groups alive in ``after`` that were not alive in ``before``:
    what one repetition left behind."""
    if not before or after.get("actors_alive") is None or before.get("actors_alive") is None:
        return {"actors": None, "placement_groups": None}
    return {
        "actors": len(set(after["actor_ids"]) - set(before["actor_ids"])),
        "placement_groups": len(set(after["placement_group_ids"])
                                - set(before["placement_group_ids"])),
    }


def loadavg() -> Optional[List[float]]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
