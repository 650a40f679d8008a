"""Run a command and report where the machine's CPU went while it ran, by kind of process.

    python scripts/cpu_by_process.py -- make test
    python scripts/cpu_by_process.py --out cpu.txt -- python -m pytest tests/integration/test_tune.py

On the 2-core development VM the test suite is CPU-bound (the CPUs are busy 96 % of a
full run), so its wall time is the CPU it needs over the cores: to shorten it, find what
the CPU is spent on. Once a second this reads every process's CPU time from ``/proc``
(Linux only) and adds what each used since the last read to its kind: a Ray worker by
the name in its title (``ray::TrainWorker``, ``ray::IDLE`` for a worker that has not
become an actor or run a task yet), any other Python process by its script or module,
the rest by executable. Every process on the machine counts, not only the command's:
Ray reaps its workers without accounting for them, so a dead worker's CPU would
otherwise be lost. A process that lives less than a second is counted from its last
read: the report says how much of the machine's CPU (``/proc/stat``) was attributed.

``--by-test FILE`` (for a pytest command) also charges the CPU to tests: the suite's
conftest writes each test's start and end to FILE with the pid of the pytest process
(an xdist worker) running it, and every process under that pid (its Ray's workers and
daemons, the scripts and servers a test starts) counts for the test that pid runs at
the time. The report then lists the modules and tests that used the most CPU.
"""

from __future__ import annotations

import argparse
import collections
import os
import shlex
import subprocess
import sys
import time
from typing import Dict, Iterator, Tuple

HZ = os.sysconf("SC_CLK_TCK")


def kind(cmdline: str, comm: str) -> str:
    """The kind a process's CPU is counted under."""
    if cmdline.startswith("ray::"):
        return "ray " + cmdline.split()[0][5:].split(".")[0][:50]
    parts = cmdline.split()
    if not parts:
        return "kernel/" + comm
    exe = os.path.basename(parts[0])
    if "python" not in exe:
        return exe[:40]
    args = [p for p in parts[1:] if not p.startswith("-")]
    if "pytest" in cmdline or "xdist" in cmdline:
        return "python pytest"
    if not args:
        return "python"
    if parts[1:2] == ["-c"]:
        return "python -c"
    script = args[0].split("site-packages/")[-1]
    if "default_worker" in script or "setup_worker" in script:
        return "ray (starting worker)"
    return "python " + script[:70]


def cpu_times() -> Dict[int, Tuple[float, str, str, int]]:
    """pid -> (CPU seconds, start time, kind, parent pid) of every process now."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # exited meanwhile
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(name)] = ((int(fields[11]) + int(fields[12])) / HZ, fields[19],
                          kind(cmdline, comm), int(fields[1]))
    return out


class TestClock:
    """Which test each pytest process runs now (from the conftest's timeline file), and
    which pytest process each process descends from."""

    def __init__(self, path: str):
        self.path, self.offset = path, 0
        self.running: Dict[int, str] = {}  # pytest pid -> node id of the running test
        self.known: set = set()            # every pytest pid seen in the file
        self.roots: Dict[Tuple[int, str], int] = {}  # (pid, start) -> pytest pid

    def read(self) -> None:
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return
        complete = chunk[:chunk.rfind("\n") + 1]  # a line being written waits
        self.offset += len(complete.encode())
        for line in complete.splitlines():
            _, pid, what, nodeid = line.split(" ", 3)
            self.known.add(int(pid))
            if what == "start":
                self.running[int(pid)] = nodeid
            else:
                self.running.pop(int(pid), None)

    def test_of(self, pid: int, now: Dict[int, Tuple[float, str, str, int]]) -> str:
        key = (pid, now[pid][1])
        root = self.roots.get(key)
        if root is None:
            p, seen = pid, 0
            while p in now and p not in self.known and seen < 64:
                p, seen = now[p][3], seen + 1
            if p in self.known:
                root = self.roots[key] = p
            else:  # not (or no longer visibly) under a pytest process
                return "(outside the tests)"
        return self.running.get(root, "(between tests)")


def used_since(last: Dict[int, Tuple[float, str, str, int]],
               now: Dict[int, Tuple[float, str, str, int]]) -> Iterator[Tuple[int, str, float]]:
    """(pid, kind, CPU seconds used) of every process in ``now`` since ``last``, two
    :func:`cpu_times` readings: a process new since ``last`` (or a pid reused by another
    process, told by its start time) counts whole."""
    for pid, (cpu, started, k, _) in now.items():
        prev = last.get(pid)
        yield pid, k, cpu - (prev[0] if prev and prev[1] == started else 0.0)


def machine_cpu_s() -> float:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / HZ  # all but idle and iowait


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the report to this file")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--by-test", metavar="FILE",
                    help="charge the CPU to pytest tests too (FILE: their timeline)")
    ap.add_argument("--top", type=int, default=40, help="tests listed with --by-test")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    ns = ap.parse_args()
    cmd = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not cmd:
        ap.error("give the command to run after --")
    by_kind: Dict[str, float] = collections.defaultdict(float)
    by_test: Dict[str, float] = collections.defaultdict(float)
    by_module_kind: Dict[Tuple[str, str], float] = collections.defaultdict(float)
    clock, env = None, None
    if ns.by_test:
        open(ns.by_test, "w").close()
        clock = TestClock(ns.by_test)
        env = {**os.environ, "TRAINYARD_TEST_TIMELINE": os.path.abspath(ns.by_test)}
    last = cpu_times()  # what ran before the command is not counted
    machine0, t0 = machine_cpu_s(), time.monotonic()
    proc = subprocess.Popen(cmd, env=env)
    while True:
        done = proc.poll() is not None
        if clock:
            clock.read()
        now = cpu_times()
        for pid, k, used in used_since(last, now):
            by_kind[k] += used
            if clock and used > 0:
                test = clock.test_of(pid, now)
                by_test[test] += used
                by_module_kind[(test.split("::", 1)[0], k)] += used
        last = now
        if done:
            break
        time.sleep(ns.interval)
    wall, machine = time.monotonic() - t0, machine_cpu_s() - machine0
    attributed = sum(by_kind.values())
    lines = [f"{shlex.join(cmd)}: exit {proc.returncode}, {wall:.0f} s of wall, "
             f"{machine:.0f} CPU-s on the machine ({machine / wall:.2f} cores busy of "
             f"{os.cpu_count()}), {attributed:.0f} CPU-s attributed",
             *(f"{v:9.1f}  {k}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])
               if v >= 0.5)]
    lines[0] = lines[0].replace("\n", "\\n")  # one line, whatever the command holds
    if clock:
        kinds_of: Dict[str, Dict[str, float]] = collections.defaultdict(dict)
        for (module, k), c in by_module_kind.items():
            kinds_of[module][k] = c
        lines.append("\nby module (the kinds that used the most under it):")
        for module, kinds in sorted(kinds_of.items(), key=lambda mk: -sum(mk[1].values())):
            top = sorted(kinds.items(), key=lambda kc: -kc[1])[:4]
            lines.append(f"{sum(kinds.values()):9.1f}  {module}  ("
                         + ", ".join(f"{k} {c:.0f}" for k, c in top) + ")")
        lines.append(f"\nthe {ns.top} tests that used the most:")
        lines += [f"{v:9.1f}  {t}" for t, v in
                  sorted(by_test.items(), key=lambda kv: -kv[1])[:ns.top]]
    report = "\n".join(lines) + "\n"
    sys.stdout.write("\n" + report)
    if ns.out:
        with open(ns.out, "w") as f:
            f.write(report)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
