"""The daemon beside a queue (issue 11, CI size): clusterscale holds 2,000 eligible pending
jobs while 50 run and 2 jobs/s churn. Every churn job reaches cc-backend exactly once, no
queued job is read or sent, and no cycle's cost grows with the queue: the window lists the
runs that ran (a few hundred lines), never the 2,000 that wait.

The production-sized run (50,000 queued, 500 running, 5 jobs/s, 128 nodes) is the benchmark
``python -m tests.bench.scale``; this test keeps its code path in CI."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ccadapter.runtime.lastrun import LastRun
from tests.bench.scale_probe import CYCLE_LINES, cycles
from tests.ccbackend import CcBackend
from tests.integration.scale_bed import QUEUED_JOBS, RUNNING, ScaleBed
from tests.integration.sync_scenario import (
    DaemonProc,
    exactly_once,
    wait_for,
    write_config,
)
from tests.integration.workload import sacct_truth
from tests.testbed.load import CHURN, QUEUED

pytestmark = [pytest.mark.integration, pytest.mark.slow]

POLL = 10  # seconds: several cycles in the test's minute and a half
# Bytes Slurm prints for one run's details (sacct --json record and scontrol show job -d:
# about 3.5 kB and 1.5 kB per job on 22.05, measured on the test bed), and for the
# fixed part of one sacct --json document (its meta block).
DETAIL_BYTES = 8_000
JSON_DOC_BYTES = 5_000
STEP_BYTES = 60  # squeue -s lines per running job (`12345|12345.batch|`, a few steps each)
def test_a_queue_costs_the_daemon_nothing(scale_cluster: ScaleBed, tmp_path: Path):
    bed = scale_cluster
    with CcBackend(tmp_path / "cc-backend", [bed.cluster]) as cc:
        cfg = write_config(bed.cluster, cc, tmp_path, slurmPollInterval=POLL,
                           prepSockListenPath=bed.hook_socket, ccPollInterval=3600)
        LastRun(tmp_path / "lastrun").set(time.time() - 5)
        daemon = DaemonProc(cfg, tmp_path / "daemon.log",
                            log_level=CYCLE_LINES)
        daemon.start()
        try:
            daemon.wait_listening(60)
            time.sleep(60)  # jobs start and end through the hook and the polls
            bed.stop_churn()
            churn = sorted(bed.submitted_ids(CHURN))
            # the last churn jobs run 25 s; then slurmdbd and the daemon catch up
            wait_for(lambda: not exactly_once(cc, bed.cluster, churn), 240,
                     "churn jobs not delivered exactly once")
        finally:
            assert daemon.terminate() == 0
        log = daemon.log.read_text()
        sent = {b["jobId"] for b in cc.started(bed.name)}  # what cc-backend holds
    assert "Traceback" not in log
    truth = sacct_truth(bed.cluster, churn)
    ran = [j for j, t in truth.items() if t["start"] and t["nodes"]]
    assert len(ran) >= 100, "too little churn to judge"
    queued = bed.submitted_ids(QUEUED)
    assert not sent & queued, "a queued job was sent"
    assert set(ran) <= sent
    seen = cycles(log)
    windows = [s for name, s in seen if name == "slurm-window"]
    assert len(windows) >= 5
    for summary in windows[1:]:
        cost = summary["cost"]
        # the runs that ran in the window (about 50 running + 2/s ended), never the queue
        assert summary["runs"] < QUEUED_JOBS / 4, summary
        # a listing line per run, a step line per running job, and the details (sacct JSON,
        # scontrol) of each run read before the hook delivered it: listing the 2,000 queued
        # jobs would add 200 kB
        assert cost["slurm_bytes"] < 100 * (summary["runs"] + 10) + STEP_BYTES * RUNNING \
            + DETAIL_BYTES * summary["read"] + JSON_DOC_BYTES * cost["slurm_commands"], summary
        # the two listings (ended runs, slurmctld's steps), the running jobs not yet open in
        # the outbox by id, then only the runs new to it (the hook delivered most)
        assert cost["slurm_commands"] <= 5, summary
        assert summary["read"] <= summary["runs"], summary
    steady = [s for s in windows[2:] if s["read"] == 0]
    assert steady, "no window found everything delivered by the hook already"
    assert all(s["cost"]["slurm_commands"] <= 3 for s in steady)
    assert any(s["cost"]["slurm_commands"] == 2 for s in steady), steady
    for name, summary in seen:
        if name == "nodestate":
            assert summary["cost"]["slurm_commands"] == 1
        if name == "stale-jobs" and summary.get("open"):
            assert summary["cost"]["slurm_commands"] <= 1 + (summary["ended"] > 0) * 2
