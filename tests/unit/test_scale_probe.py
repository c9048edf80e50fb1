"""The scale benchmark's readers of the daemon's log and /proc (tests/bench/scale_probe.py)."""

import os
import subprocess
import sys
import time

from tests.bench.scale_probe import (
    children_rss_mb,
    cpu_seconds,
    cycles,
    descendants,
    per_reconciler,
    summarise_lines,
)

LOG = """\
INFO ccadapter.daemon: slurm-window: {'runs': 3, 'cost': {'seconds': 1.2, 'cpu': 0.02, \
'slurm_commands': 1, 'slurm_bytes': 300, 'slurm_cpu': 0.01, 'slurm_seconds': 1.1}} (1.2 s)
INFO ccadapter.cc.rest_delivery: delivered start of job 7: HTTP 201
INFO ccadapter.cc.rest_delivery: delivered stop of job 7: HTTP 200
INFO ccadapter.daemon: slurm-window: {'runs': 5, 'cost': {'seconds': 0.4, 'cpu': 0.03, \
'slurm_commands': 1, 'slurm_bytes': 500, 'slurm_cpu': 0.01, 'slurm_seconds': 0.1}} (0.4 s)
WARNING ccadapter.prep.fastpath: fast path full
"""


def test_per_reconciler_tells_the_wait_for_slurm_from_the_rest():
    got = per_reconciler(cycles(LOG))["slurm-window"]
    assert got["cycles"] == 2 and got["wall_max"] == 1.2
    assert (got["slurm_wall_median"], got["slurm_wall_max"]) == (0.6, 1.1)
    assert got["own_wall_max"] == 0.3  # the second cycle: 0.4 s, 0.1 of it in Slurm
    assert got["bytes_max"] == 500


def test_a_cycle_logged_before_slurm_seconds_existed_counts_as_no_wait():
    old = LOG.replace(", 'slurm_seconds': 1.1", "").replace(", 'slurm_seconds': 0.1", "")
    got = per_reconciler(cycles(old))["slurm-window"]
    assert got["slurm_wall_max"] == 0 and got["own_wall_max"] == 1.2


def test_lines_between_two_samples_are_summarised_by_cycle_and_logger():
    assert summarise_lines(LOG.splitlines()) == [
        "cycle slurm-window", "cycle slurm-window", "2 x ccadapter.cc.rest_delivery",
        "1 x ccadapter.prep.fastpath"]
    assert len(summarise_lines(LOG.splitlines() * 9)) == 8


def test_cpu_counts_children_still_running_and_their_own():
    """A long-lived child (the daemon's scontrol) is counted before it ends: the kernel
    accounts its CPU to the parent's cutime only once it is reaped."""
    before = cpu_seconds(os.getpid())
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n" \
           "time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        deadline = time.monotonic() + 20
        while cpu_seconds(os.getpid()) - before < 0.4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert child.poll() is None  # still running, yet counted
        assert cpu_seconds(os.getpid()) - before >= 0.4
        assert child.pid in descendants(os.getpid())
        assert children_rss_mb(os.getpid()) > 1
    finally:
        child.kill()
        child.wait()
    assert child.pid not in descendants(os.getpid())
