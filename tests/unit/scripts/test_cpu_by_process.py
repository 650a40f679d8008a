"""scripts/cpu_by_process.py: the CPU a command's processes used, by kind, and its exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "cpu_by_process.py"
BURN = "import time\nend = time.process_time() + 1.5\nwhile time.process_time() < end: pass\n"


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc (Linux)")
def test_a_busy_child_is_counted_under_its_kind_and_the_exit_status_passes_through(tmp_path):
    out = tmp_path / "cpu.txt"
    # A shell runs two Python children one after the other; the last one fails.
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--interval", "0.2", "--",
         "sh", "-c", f'{sys.executable} -c "$0" && {sys.executable} -c "raise SystemExit(3)"',
         BURN], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    report = out.read_text()
    assert report in proc.stdout
    header, *rows = report.splitlines()
    assert ": exit 3, " in header and "CPU-s attributed" in header
    counted = {row.split(None, 1)[1]: float(row.split(None, 1)[0]) for row in rows}
    # The 1.5 CPU-s burn, less what it used after the last read before it exited (a
    # read every 0.2 s, later on a loaded machine).
    assert counted.get("python -c", 0.0) >= 0.75, report


def test_without_a_command_it_says_how_to_give_one():
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "give the command to run after --" in proc.stderr


# Stands in for a pytest process under --by-test: it writes the timeline the suite's
# conftest writes (with its own pid) and runs each "test" in a child process, as a test
# runs Ray's workers and scripts.
FAKE_PYTEST = f"""
import os, subprocess, sys, time
def mark(what, nodeid):
    with open(os.environ["TRAINYARD_TEST_TIMELINE"], "a") as f:
        f.write(f"{{time.time():.3f}} {{os.getpid()}} {{what}} {{nodeid}}\\n")
for nodeid, burn in (("tests/a.py::test_busy", True), ("tests/b.py::test_idle", False)):
    mark("start", nodeid)
    subprocess.run([sys.executable, "-c", {BURN!r} if burn else "import time; time.sleep(1)"])
    mark("end", nodeid)
"""


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc (Linux)")
def test_by_test_charges_a_childs_cpu_to_the_test_its_parent_ran(tmp_path):
    out = tmp_path / "cpu.txt"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--interval", "0.2",
         "--by-test", str(tmp_path / "timeline.txt"), "--", sys.executable, "-c",
         FAKE_PYTEST], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = out.read_text()
    tests = report.split("tests that used the most:\n", 1)[1].splitlines()
    charged = {row.split(None, 1)[1]: float(row.split(None, 1)[0]) for row in tests}
    assert charged["tests/a.py::test_busy"] >= 0.75, report
    assert charged.get("tests/b.py::test_idle", 0.0) < 0.5, report
    modules = report.split("by module", 1)[1]
    assert "tests/a.py  (python -c " in modules, report
