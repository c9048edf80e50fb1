"""Issue 3 on real Slurm 22.05, 24.11 and 26.05: every started job reaches the (strict)
cc-backend stand-in exactly once as started and once as stopped, whatever fails between."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from ccadapter.lastrun import LastRun
from tests.integration.sync_scenario import (
    TOKEN,
    ccadapter,
    exactly_once,
    resilience,
    write_config,
)
from tests.standin.ccbackend import CcBackendStandin

pytestmark = pytest.mark.integration


def test_sync_once_delivers_the_workload_exactly_once(workload, tmp_path):
    cluster, sub = workload.sub.cluster, workload.sub
    with CcBackendStandin(TOKEN, clusters=[cluster.name]) as standin:
        cfg = write_config(cluster, standin, tmp_path)
        LastRun(tmp_path / "lastrun").set(sub.submitted_at - 5)
        dry = ccadapter("sync", "--once", "--dry-run", "--config", str(cfg))
        assert dry.returncode == 0, dry.stderr
        assert [r for r in standin.requests() if r.method != "GET"] == []  # sends nothing
        events = [json.loads(ln) for ln in dry.stdout.splitlines() if '"event"' in ln]
        assert {e["jobId"] for e in events if e["event"] == "start"} >= set(sub.ids["excl"])
        assert LastRun(tmp_path / "lastrun").get() == pytest.approx(sub.submitted_at - 5)
        for _ in range(2):  # the second cycle finds everything delivered: no new request
            res = ccadapter("sync", "--once", "--config", str(cfg))
            assert res.returncode == 0, res.stderr
        assert exactly_once(standin, cluster, sub.all_ids()) == []
        starts = standin.count("/api/jobs/start_job/")
        assert starts == len(standin.started(cluster.name))  # not even a 422 the second time


@pytest.fixture(scope="session")
def resilience_runs(testbed, tmp_path_factory):
    outage = float(os.environ.get("CCADAPTER_OUTAGE_SECONDS", "120"))
    with ThreadPoolExecutor(len(testbed)) as pool:
        futures = {v: pool.submit(resilience, c, tmp_path_factory.mktemp(f"res{v}"), outage)
                   for v, c in testbed.items()}
        runs = {v: f.result() for v, f in futures.items()}
    yield runs
    for run in runs.values():
        run.standin.stop()


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_daemon_survives_outage_kill_and_slurmdbd_stop(resilience_runs, version):
    run = resilience_runs[version]
    assert exactly_once(run.standin, run.cluster, run.ids) == []
    assert run.exit_code == 0, run.log[-2000:]
    assert TOKEN not in run.log
    assert "Traceback" not in run.log
