"""scripts/cpu_by_process.py: the CPU a command's processes used, by kind, and its exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "cpu_by_process.py"
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
