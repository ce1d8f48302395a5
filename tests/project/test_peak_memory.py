"""The demo's peak-memory watcher on real processes: a parent that grows, and a child that
grows and exits before the watch ends."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from feddpsyn.peak_memory import PeakMemory

# The parent holds 120 MB at its peak, then frees it; its child holds 80 MB for two seconds
# and exits. Both sizes are touched pages (bytearray), so they are resident.
SCRIPT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
                          "import time; b = bytearray(80 << 20); time.sleep(2)"])
held = bytearray(120 << 20)
time.sleep(0.5)
del held
child.wait()
print("done", flush=True)
time.sleep(30)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_watch_keeps_a_freed_peak_and_a_worker_that_exited():
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        with PeakMemory({"parent": proc.pid}, interval=0.1) as watch:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "done"  # the child has exited
            time.sleep(0.2)
        report = watch.report()
    finally:
        proc.kill()
        proc.wait(10)
    assert report is not None
    # The kernel's high-water mark keeps the freed 120 MB; the sampled child its 80 MB.
    assert 120 <= report["parent"]["process_mb"] < 400
    assert 80 <= report["parent"]["largest_worker_mb"] < 300


def test_a_process_that_is_gone_reports_zero_not_an_error():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(10)
    with PeakMemory({"gone": proc.pid}, interval=0.05) as watch:
        time.sleep(0.1)
    report = watch.report()
    if report is not None:
        assert report["gone"] == {"process_mb": 0.0, "largest_worker_mb": 0.0,
                                  "workers_sampled_every_s": 0.05}
