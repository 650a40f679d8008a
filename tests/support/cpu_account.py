"""The CPU each test module used, for the suite's summary ("most CPU by module").

The suite is CPU-bound on CI's 2 cores, so a module costs the CPU of what its tests
start (Ray's daemons and workers, scripts, servers), not its wall time under xdist. A
thread of the pytest process that runs the session (the xdist controller, or the only
process of a serial run) reads every process's CPU time from ``/proc`` once a second and
charges what each used since the last reading to the test that the pytest process it
descends from runs at the time. Which test runs where comes from the timeline file that
``tests/conftest.py`` appends each test's start and end to (``TRAINYARD_TEST_TIMELINE``,
the format ``scripts/cpu_by_process.py --by-test`` reads too).

Parentage is read, not assumed: Ray's raylet ignores SIGCHLD, so a Ray worker that
exits takes its CPU with it instead of adding it to its parent's; sampling each process
loses at most its last second. A process re-parented away from its pytest process (a
daemon that double-forks) counts from then on as outside the tests.
"""

from __future__ import annotations

import os
import threading
from typing import Dict, Tuple

_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
OUTSIDE = "(outside the tests)"
BETWEEN = "(between tests)"

Reading = Dict[int, Tuple[float, bytes, int]]  # pid -> (CPU-s, start time, parent pid)


def read_processes() -> Reading:
    """Every process's CPU-seconds (user + system), start time and parent pid."""
    out: Reading = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:  # exited since the listing
            continue
        fields = data[data.rindex(b")") + 2:].split()  # after "pid (comm) "
        out[int(name)] = ((int(fields[11]) + int(fields[12])) / _HZ, fields[19],
                          int(fields[1]))
    return out


class Timeline:
    """Which test each pytest process runs now, from the conftest's timeline file."""

    def __init__(self, path: str) -> None:
        self.path, self._offset = path, 0
        self.running: Dict[int, str] = {}  # pytest pid -> node id of its running test
        self.pytest_pids: set = set()

    def read(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return
        complete = chunk[:chunk.rfind(b"\n") + 1]  # a line still being written waits
        self._offset += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            _, pid, what, nodeid = line.split(" ", 3)
            self.pytest_pids.add(int(pid))
            if what == "start":
                self.running[int(pid)] = nodeid
            else:
                self.running.pop(int(pid), None)


class CpuAccount:
    """Charges the machine's processes' CPU to test modules while it runs."""

    def __init__(self, timeline_path: str, interval_s: float = 1.0) -> None:
        self.timeline = Timeline(timeline_path)
        self.by_module: Dict[str, float] = {}
        self._interval = interval_s
        self._roots: Dict[Tuple[int, bytes], int] = {}  # process -> its pytest pid
        self._last: Reading = read_processes()  # what ran before is not counted
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="cpu-account", daemon=True)

    def start(self) -> "CpuAccount":
        self._thread.start()
        return self

    def stop(self) -> Dict[str, float]:
        """Stop sampling after one last reading; CPU-seconds by module."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.sample()
        return dict(self.by_module)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        with self._lock:
            self.timeline.read()
            now = read_processes()
            for pid, (cpu, started, _) in now.items():
                prev = self._last.get(pid)
                used = cpu - (prev[0] if prev and prev[1] == started else 0.0)
                if used > 0:
                    module = self._module_of(pid, started, now)
                    self.by_module[module] = self.by_module.get(module, 0.0) + used
            self._last = now

    def _module_of(self, pid: int, started: bytes, now: Reading) -> str:
        root = self._roots.get((pid, started))
        if root is None:
            p, hops = pid, 0
            while p in now and p not in self.timeline.pytest_pids and hops < 64:
                p, hops = now[p][2], hops + 1
            if p not in self.timeline.pytest_pids:
                # Not under a pytest process, or under one that has not started a test
                # yet: asked again at the next reading.
                return OUTSIDE
            root = self._roots[(pid, started)] = p
        test = self.timeline.running.get(root)
        return test.split("::", 1)[0] if test else BETWEEN
