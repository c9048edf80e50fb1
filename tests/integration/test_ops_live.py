"""The operator commands (issue 6, parts 3 and 4) on real Slurm 22.05 with the real daemon
and the real cc-backend 1.5.4: ``status`` while the daemon runs and after it stopped,
backfill and recover refused beside it and idempotent after it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import CcBackend
from tests.integration.sync_scenario import (
    START,
    STOP,
    DaemonProc,
    ccadapter,
    delivered,
    exactly_once,
    submit_batch,
    wait_for,
    write_config,
)
from tests.integration.workload import Cluster

pytestmark = pytest.mark.integration
ROUTINES = {"slurm-window", "slurm-lookback", "stale-jobs", "cc-cache", "lost-stops",
            "nodestate"}


def status(cfg: Path) -> dict:
    res = ccadapter("status", "--format", "json", "--config", str(cfg), timeout=60)
    assert res.returncode == 0, res.stderr
    token = json.loads(cfg.read_text())["ccRestJwt"]
    assert token not in res.stdout + res.stderr
    return json.loads(res.stdout)


def settled(cfg: Path, timeout: float) -> dict:
    """The status once every routine has a cycle on record and nothing waits (a nodestate
    is enqueued every cycle: the document is taken when it, too, was delivered)."""
    until = time.time() + timeout
    while time.time() < until:
        doc = status(cfg)
        if set(doc["reconcilers"]) >= ROUTINES and doc["outbox"]["pending"] == 0:
            return doc
        time.sleep(0.5)
    raise TimeoutError(f"status never settled: {doc}")


def job_events_pending(doc: dict) -> int:
    return sum(doc["outbox"]["counts"].get(k, {}).get("pending", 0) for k in ("start", "stop"))


def test_status_running_then_stopped_and_offline_commands(testbed, tmp_path):
    cluster = testbed["22.05"]
    with CcBackend(tmp_path / "cc-backend", [cluster]) as cc:
        cfg = write_config(cluster, cc, tmp_path, ccPollInterval=3600,
                           prepSockListenPath=f"unix:{tmp_path}/run/hook.sock")
        os.chmod(cfg, 0o644)  # holds the JWT: the daemon must say so, without the JWT
        started_at = time.time()
        LastRun(tmp_path / "lastrun").set(started_at - 5)
        daemon = DaemonProc(cfg, tmp_path / "daemon.log")
        daemon.start()
        try:
            ids = submit_batch(cluster, "ops", 3)
            wait_for(lambda: delivered(cc, ids), 120, "jobs not delivered")
            running = settled(cfg, 60)
            refused = ccadapter("backfill", "--since", "10m", "--config", str(cfg))
        finally:
            exit_code = daemon.terminate()
        stopped = status(cfg)
        check_running(running, daemon.proc.pid, len(ids))
        check_stopped(stopped, running)
        assert refused.returncode == 1 and "needs the daemon stopped" in refused.stderr
        assert exit_code == 0
        log = daemon.log.read_text()
        assert f"{cfg} holds ccRestJwt and is readable by group root and others" in log
        assert cc.token not in log and "Traceback" not in log
        check_offline_commands(cfg, cc, cluster, started_at, ids)


def check_running(doc: dict, pid: int, n_jobs: int) -> None:
    assert doc["daemon"]["pid"] == pid and doc["daemon"]["alive"] is True
    assert doc["daemon"]["lockHeld"] is True and doc["daemon"]["lockPids"] == [pid]
    for name in ROUTINES:
        cycle = doc["reconcilers"][name]
        assert cycle["ok"] is True and cycle["error"] is None, (name, cycle)
        assert 0 <= cycle["age"] < 60 and cycle["lastOk"] == pytest.approx(cycle["at"], abs=5)
    box = doc["outbox"]
    assert box["exists"] and box["pending"] == 0 and box["rejected"] == 0
    assert box["oldestPendingAge"] is None and box["rejectedEvents"] == []
    assert box["counts"]["start"]["delivered"] >= n_jobs
    assert box["counts"]["stop"]["delivered"] >= n_jobs
    assert doc["lastRun"]["age"] < 60


def check_stopped(doc: dict, running: dict) -> None:
    assert doc["daemon"] == {**running["daemon"], "pid": None, "alive": False,
                             "lockHeld": False, "lockPids": []}
    assert set(doc["reconcilers"]) >= ROUTINES  # kept on disk by the daemon
    for name in ROUTINES:
        assert doc["reconcilers"][name]["at"] >= running["reconcilers"][name]["at"]
    assert job_events_pending(doc) == 0  # a last nodestate may wait for the next start
    assert doc["outbox"]["counts"]["start"]["delivered"] >= \
        running["outbox"]["counts"]["start"]["delivered"]


def check_offline_commands(cfg: Path, cc: CcBackend, cluster: Cluster,
                           since: float, ids: list[int]) -> None:
    """With the daemon stopped: a backfill over its range sends nothing again, and a
    recover finds nothing stale and nothing to repair."""
    sent = len(cc.requests())
    res = ccadapter("backfill", "--since", f"@{since - 60:.0f}", "--chunk-hours", "0.01",
                    "--config", str(cfg))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("chunk 1/") and ", 0 new, 0 resent" in lines[-2]
    assert [r for r in cc.requests()[sent:] if r.path in (START, STOP)] == []
    res = ccadapter("recover", "--stale-wait", "1", "--config", str(cfg))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "no stale PID file, no stale socket"
    assert '"ended": 0' in res.stdout and '"stopped": 0' in res.stdout
    assert exactly_once(cc, cluster, ids) == []
