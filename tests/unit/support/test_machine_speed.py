"""tests/support/machine_speed.py: the speed probe the suite's summary prints."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import machine_speed


def test_steal_share_is_the_hypervisors_part_of_the_time_between_readings():
    assert machine_speed.steal_share((1000, 10), (2000, 60)) == pytest.approx(0.05)
    assert machine_speed.steal_share((1000, 10), (2000, 10)) == 0.0
    # No reading, or no time between them: nothing to say.
    assert machine_speed.steal_share(None, (2000, 60)) is None
    assert machine_speed.steal_share((1000, 10), None) is None
    assert machine_speed.steal_share((1000, 10), (1000, 10)) is None


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's /proc/stat")
def test_cpu_times_reads_the_machine():
    total, steal, busy = machine_speed.cpu_times()
    assert total > 0 and 0 <= steal <= total and steal <= busy <= total


def test_busy_seconds_are_the_busy_jiffies_between_readings():
    hz = os.sysconf("SC_CLK_TCK")
    assert machine_speed.busy_seconds((0, 0, 0), (9 * hz, 0, 3 * hz)) == pytest.approx(3.0)
    assert machine_speed.busy_seconds(None, (1, 0, 1)) is None


def test_reference_is_the_best_of_its_repeats(monkeypatch):
    clock = iter([0.0, 0.30, 1.0, 1.10, 2.0, 2.25])  # three repeats: 300, 100, 250 ms
    monkeypatch.setattr(machine_speed.time, "process_time", lambda: next(clock))
    monkeypatch.setattr(machine_speed, "_workload", lambda: 0)
    assert machine_speed.reference_ms(repeats=3) == pytest.approx(100.0)


_BURNS_IN_A_GRANDCHILD = """
import subprocess, sys

BURN = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 2.5: pass"


def test_one():
    subprocess.run([sys.executable, "-c", "import subprocess, sys; "
                    f"subprocess.run([sys.executable, '-c', {BURN!r}], check=True)"],
                   check=True)
"""


def test_a_run_prints_the_speed_and_the_cpu_by_module_in_its_summary(tmp_path):
    """A module's CPU counts what its tests started: here a grandchild's 2.5 s."""
    (tmp_path / "test_one.py").write_text(_BURNS_IN_A_GRANDCHILD)
    repo = os.path.abspath(os.path.join(__file__, *[os.pardir] * 4))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--rootdir", repo, "-c", os.path.join(repo, "pyproject.toml"),
         "--confcutdir", repo, "-p", "tests.conftest", str(tmp_path / "test_one.py")],
        cwd=repo, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "machine speed (tests/support/machine_speed.py)" in out.stdout
    line = next(x for x in out.stdout.splitlines() if x.startswith("reference loop:"))
    assert "ms of CPU at the start" in line and "ms at the end" in line
    cpu = next(x for x in out.stdout.splitlines() if x.startswith("CPU of the run:"))
    assert "CPU-s on the machine" in cpu and "CPU-s under the test processes" in cpu
    assert "most CPU by module" in out.stdout
    row = next(x for x in out.stdout.splitlines() if x.endswith("test_one.py")
               and " CPU-s " in x)
    assert float(row.split()[0]) >= 1.0, row  # of 2.5: at most its last reading is lost
