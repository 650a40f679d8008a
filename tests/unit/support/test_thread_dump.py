"""The thread dump a test prints when a driver it started does not exit in time."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.support.subprocess_env import thread_dump


def test_thread_dump_shows_where_a_live_process_waits():
    code = "import time\ndef waiting_for_the_test():\n    time.sleep(60)\nwaiting_for_the_test()\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 30
        dump = ""
        while "waiting_for_the_test" not in dump and time.monotonic() < deadline:
            time.sleep(0.2)
            dump = thread_dump(proc.pid)
        assert "waiting_for_the_test" in dump, dump
    finally:
        proc.kill()
        proc.wait()


def test_thread_dump_of_a_gone_process_says_so_instead_of_raising():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dump = thread_dump(proc.pid)
    assert "running" in dump or "No such" in dump, dump  # py-spy's reason, not a raise
