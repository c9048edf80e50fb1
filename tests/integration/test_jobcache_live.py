"""Issue 13, item 1 on real Slurm: cc-backend 1.5 keeps new starts in a job cache that its
commit worker moves into the job table every minute (the stand-in commits every 60 s, as
cc-backend's sample config). The daemon is restarted within a minute of its starts, once
cleanly (SIGTERM, as `systemctl restart`) and once killed while it delivers, so that:
cc-cache at start finds its fresh starts missing from GET /api/jobs/ (not committed yet),
and starts are sent again while their runs are still cached (answered 500).

Expected: one job per run in cc-backend, every stop delivered, nothing rejected in the
outbox, no answer 400."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ccadapter.outbox import Outbox, admin
from ccadapter.runtime.lastrun import LastRun
from tests.conftest import HEAVY_VERSIONS
from tests.integration.sync_scenario import (
    START,
    TOKEN,
    DaemonProc,
    exactly_once,
    wait_for,
    write_config,
)
from tests.integration.test_hook_live import hook_socket
from tests.integration.workload import Cluster, sacct_truth
from tests.standin.ccbackend import CcBackendStandin

pytestmark = pytest.mark.integration
COMMIT = 60.0  # cc-backend's sample config: "commit-job-worker": "1m"


def submit(cluster: Cluster, tag: str, seconds: list[int]) -> list[int]:
    ids = []
    for i, sleep in enumerate(seconds):
        out = cluster.run("sbatch", "--parsable", "-J", f"{tag}{i}", "-o", "/dev/null",
                          "--wrap", f"sleep {sleep}")
        ids.append(int(out.strip().split(";")[0]))
    return ids


def started(standin: CcBackendStandin, ids: list[int]) -> set[int]:
    return {b["jobId"] for b in standin.started()} & set(ids)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cluster", HEAVY_VERSIONS, indirect=True)
def test_restarts_within_a_commit_interval(cluster, tmp_path):
    with CcBackendStandin(TOKEN, clusters=[cluster.name], commit_interval=COMMIT) as standin:
        cfg = write_config(cluster, standin, tmp_path, prepSockListenPath=hook_socket(cluster))
        LastRun(tmp_path / "lastrun").set(time.time() - 5)
        daemon = DaemonProc(cfg, tmp_path / "daemon.log")
        daemon.start()
        try:
            daemon.wait_listening()
            # A: jobs that outlive the restart, and short ones
            ids = submit(cluster, "cacheA", [40, 40, 40, 2, 3, 4])
            wait_for(lambda: started(standin, ids) == set(ids), 30, "batch A not started")
            assert standin.cached(cluster.name), "the starts went into cc-backend's cache"
            # restart 1, seconds after the starts: cc-cache runs first and GET /api/jobs/
            # does not list the cached runs
            listed = standin.count("/api/jobs/")
            assert daemon.terminate() == 0
            daemon.start()
            wait_for(lambda: standin.count("/api/jobs/") > listed, 30, "no cc-cache cycle")
            # B: killed while delivering (slow cc-backend), restarted at once
            standin.latency(0.3)
            b_ids = submit(cluster, "cacheB", [30, 30, 2, 3])
            ids += b_ids
            wait_for(lambda: started(standin, b_ids), 60, "batch B: no start before the kill")
            daemon.kill()
            standin.latency(0)
            daemon.start()
            # every stop: a cached start sent again is answered 500 (UNIQUE on job_cache),
            # which counts as delivered, or 422 once committed
            wait_for(lambda: {b["jobId"] for b in standin.stopped()} >= set(ids),
                     4 * COMMIT + 120, "not every stop delivered")
        finally:
            exit_code = daemon.terminate() if daemon.proc.poll() is None else None
        assert exit_code == 0
        standin.commit_now()
        truth = sacct_truth(cluster, ids)
        runs = {(j, t["start"]) for j, t in truth.items() if t["start"] and t["nodes"]}
        jobs = standin.jobs(cluster.name)
        stored = [(j["jobId"], j["startTime"]) for j in jobs if j["jobId"] in set(ids)]
        assert sorted(stored) == sorted(runs)  # one job per run
        assert {j["jobState"] for j in jobs if j["jobId"] in set(ids)} <= {
            "completed", "failed", "cancelled", "timeout"}
        assert exactly_once(standin, cluster, ids) == []
        box = Outbox(Path(tmp_path, "state", "outbox.sqlite"))
        try:
            stats = admin.stats(box.store)
            assert stats["rejected"] == 0, admin.rejected(box.store)
            pending = {k: v for k, v in stats["counts"].items()
                       if k.endswith(":pending") and not k.startswith("nodestate")}
            assert pending == {}
        finally:
            box.close()
        # the starts sent again found their runs cached (500) or committed (422)
        resent = [r for r in standin.requests(START) if r.status in (500, 422)]
        log = daemon.log.read_text()
        assert "Traceback" not in log and "cc-backend rejected" not in log
        print(f"{cluster.name}: {len(runs)} runs, starts answered 500/422: {len(resent)}")
