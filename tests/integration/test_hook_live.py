"""Issue 4 on real Slurm: slurmctld runs the hook for every job (the test bed is configured
with it), the daemon syncs the announced jobs at once; the poll (60 s here) cannot explain
what arrives within seconds. The receiver is the real cc-backend 1.5.4 (tests/ccbackend.py)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import CcBackend
from tests.conftest import HEAVY_VERSIONS
from tests.integration.sync_scenario import (
    DaemonProc,
    exactly_once,
    submit_batch,
    wait_for,
    write_config,
)
from tests.integration.workload import Cluster, sacct_truth

pytestmark = pytest.mark.integration


def hook_socket(cluster: Cluster) -> str:
    """Where the test bed's hook wrapper of this cluster sends (``slurm info``)."""
    return cluster.hook_socket


def start_daemon(cluster: Cluster, receiver: CcBackend, tmp: Path,
                 poll: int = 60, listen: str | None = None, **extra) -> DaemonProc:
    """A daemon listening for the hook (on ``listen``, else where the test bed's wrapper
    sends), its first poll cycle passed; ``poll`` seconds to the next (600: what arrives
    later came through the hook). ``extra``: more config keys."""
    cfg = write_config(cluster, receiver, tmp, slurmPollInterval=poll, ccPollInterval=3600,
                       prepSockListenPath=listen or hook_socket(cluster), **extra)
    LastRun(tmp / "lastrun").set(time.time() - 5)
    daemon = DaemonProc(cfg, tmp / "daemon.log")
    daemon.start()
    daemon.wait_listening()
    time.sleep(1)  # let the first poll cycle pass
    return daemon


def assert_started_at_once(cc: CcBackend, cluster: Cluster, ids: list[int]) -> None:
    """Each job held once, its start taken by cc-backend within 3 s of Slurm's StartTime."""
    assert exactly_once(cc, cluster, ids) == []
    truth = sacct_truth(cluster, ids)
    starts = {r.body["jobId"]: r.time for r in cc.requests("/api/jobs/start_job/")
              if r.status == 201}
    for job_id in ids:  # Slurm's StartTime has whole seconds: allow one more
        assert starts[job_id] - truth[job_id]["start"] < 3.0, job_id


def test_jobs_arrive_through_the_hook_within_seconds(cluster, tmp_path):
    with CcBackend(tmp_path / "cc-backend", [cluster]) as cc:
        daemon = start_daemon(cluster, cc, tmp_path)
        try:
            ids = submit_batch(cluster, "hook", 6)
            wait_for(lambda: {b["jobId"] for b in cc.stopped()} >= set(ids), 25,
                     "not delivered within 25 s although the poll interval is 60 s")
        finally:
            assert daemon.terminate() == 0
        assert_started_at_once(cc, cluster, ids)
        log = daemon.log.read_text()
        assert "Traceback" not in log and cc.token not in log


@pytest.mark.parametrize("cluster", HEAVY_VERSIONS, indirect=True)
def test_hook_without_daemon_exits_0_and_the_poll_delivers_later(cluster, tmp_path):
    root = cluster.prefix[1] if cluster.prefix else ""
    started = time.monotonic()
    res = subprocess.run([*cluster.prefix, "/usr/local/sbin/ccadapter-testbed-hook"],
                         capture_output=True, text=True, timeout=10, check=False,
                         env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_JOB_ID": "1",
                              "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"})
    assert res.returncode == 0 and time.monotonic() - started < 1.5
    assert "daemon not told" in res.stderr
    assert Path(root + "/usr/local/lib/ccadapter/hook.py").exists()
    ids = submit_batch(cluster, "nodaemon", 3)  # slurmctld runs the hook: nobody listens
    wait_for(lambda: all(r["state"] == "COMPLETED" for r in
                         sacct_truth(cluster, ids).values()) and
             len(sacct_truth(cluster, ids)) == 3, 60, "jobs did not finish")
    with CcBackend(tmp_path / "cc-backend", [cluster]) as cc:
        cfg = write_config(cluster, cc, tmp_path, prepSockListenPath=hook_socket(cluster))
        LastRun(tmp_path / "lastrun").set(time.time() - 60)
        daemon = DaemonProc(cfg, tmp_path / "daemon.log")
        daemon.start()
        try:
            wait_for(lambda: {b["jobId"] for b in cc.stopped()} >= set(ids), 60,
                     "the poll did not deliver the jobs the hook could not announce")
        finally:
            assert daemon.terminate() == 0
        assert exactly_once(cc, cluster, ids) == []
