"""Issue 13, item 1 on real Slurm and the real cc-backend 1.5.4: cc-backend keeps new starts in
a job cache that its commit worker moves into the job table every 2 minutes (its default
``commit-job-worker``, left unset here; the first commit one interval after its start). The
daemon is restarted within a minute of its starts, once cleanly (SIGTERM, as `systemctl
restart`) and once killed while it delivers, so that: cc-cache at start finds its fresh
starts missing from GET /api/jobs/ (not committed yet), and starts are sent again while
their runs are still cached (answered 500).

Expected: one job per run in cc-backend, every stop delivered, nothing rejected in the
outbox, no answer 400."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ccadapter.outbox import Outbox, admin
from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import CcBackend
from tests.conftest import HEAVY_VERSIONS
from tests.integration.conftest import each_at_once
from tests.integration.sync_scenario import (
    START,
    DaemonProc,
    exactly_once,
    wait_for,
    write_config,
)
from tests.integration.test_hook_live import hook_socket
from tests.integration.workload import Cluster, sacct_truth

pytestmark = pytest.mark.integration
COMMIT = 120.0  # cc-backend's default commit-job-worker, "2m"


def submit(cluster: Cluster, tag: str, seconds: list[int]) -> list[int]:
    ids = []
    for i, sleep in enumerate(seconds):
        out = cluster.run("sbatch", "--parsable", "-J", f"{tag}{i}", "-o", "/dev/null",
                          "--wrap", f"sleep {sleep}")
        ids.append(int(out.strip().split(";")[0]))
    return ids


def started(cc: CcBackend, ids: list[int]) -> set[int]:
    """The jobs whose start cc-backend accepted (201: into its cache, not listed yet)."""
    return {r.body["jobId"] for r in cc.requests(START) if r.status == 201} & set(ids)


@dataclass
class CacheRun:
    """One cluster's run: what cc-backend holds and took, Slurm's truth, the daemon's side."""

    cluster: Cluster
    ids: list[int]
    exit_code: int | None
    runs: set[tuple[int, int]]  # Slurm's (jobId, startTime) of every run that started
    jobs: list[dict]  # cc-backend's jobs of the cluster, through its API
    problems: list[str]  # tests/integration/expect.py against Slurm's truth
    outbox: dict
    rejected: list
    resent: int  # starts sent again, answered 500 (still cached) or 422 (committed)
    log: str


def cache_run(cluster: Cluster, tmp_path: Path) -> CacheRun:
    with CcBackend(tmp_path / "cc-backend", [cluster], commit_interval=None) as cc:
        cfg = write_config(cluster, cc, tmp_path, prepSockListenPath=hook_socket(cluster))
        LastRun(tmp_path / "lastrun").set(time.time() - 5)
        daemon = DaemonProc(cfg, tmp_path / "daemon.log")
        daemon.start()
        try:
            daemon.wait_listening()
            # A: jobs that outlive the restart, and short ones
            ids = submit(cluster, "cacheA", [40, 40, 40, 2, 3, 4])
            wait_for(lambda: started(cc, ids) == set(ids), 30, "batch A not started")
            assert cc.cached(), "the starts went into cc-backend's cache"
            # restart 1, seconds after the starts: cc-cache runs first and GET /api/jobs/
            # does not list the cached runs
            listed = cc.count("/api/jobs/")
            assert daemon.terminate() == 0
            daemon.start()
            wait_for(lambda: cc.count("/api/jobs/") > listed, 30, "no cc-cache cycle")
            # B: killed while delivering (slow cc-backend), restarted at once
            cc.latency(0.3)
            b_ids = submit(cluster, "cacheB", [30, 30, 2, 3])
            ids += b_ids
            wait_for(lambda: started(cc, b_ids), 60, "batch B: no start before the kill")
            daemon.kill()
            cc.latency(0)
            daemon.start()
            # every stop: a cached start sent again is answered 500 (UNIQUE on job_cache),
            # which counts as delivered, or 422 once committed
            wait_for(lambda: {b["jobId"] for b in cc.stopped()} >= set(ids),
                     4 * COMMIT + 120, "not every stop delivered")
        finally:
            exit_code = daemon.terminate() if daemon.proc.poll() is None else None
        cc.wait_committed(COMMIT + 30)
        truth = sacct_truth(cluster, ids)
        runs = {(j, t["start"]) for j, t in truth.items() if t["start"] and t["nodes"]}
        jobs = cc.jobs(cluster.name)
        problems = exactly_once(cc, cluster, ids)
        box = Outbox(Path(tmp_path, "state", "outbox.sqlite"))
        try:
            stats, rejected = admin.stats(box.store), admin.rejected(box.store)
        finally:
            box.close()
        resent = sum(1 for r in cc.requests(START) if r.status in (500, 422))
    return CacheRun(cluster, ids, exit_code, runs, jobs, problems, stats, rejected, resent,
                    daemon.log.read_text())


@pytest.fixture(scope="module")
def cache_runs(testbed, tmp_path_factory):
    """The heavy versions' runs at once (each waits out cc-backend's 2-minute commit); a
    cluster's failure is raised by its own test."""
    return each_at_once(cache_run, {v: testbed[v] for v in HEAVY_VERSIONS},
                        tmp_path_factory, "cache")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", HEAVY_VERSIONS)
def test_restarts_within_a_commit_interval(cache_runs, version):
    run = cache_runs[version]
    if isinstance(run, BaseException):
        raise run
    assert run.exit_code == 0
    stored = [(j["jobId"], j["startTime"]) for j in run.jobs if j["jobId"] in set(run.ids)]
    assert sorted(stored) == sorted(run.runs)  # one job per run
    assert {j["jobState"] for j in run.jobs if j["jobId"] in set(run.ids)} <= {
        "completed", "failed", "cancelled", "timeout"}
    assert run.problems == []
    assert run.outbox["rejected"] == 0, run.rejected
    pending = {k: v for k, v in run.outbox["counts"].items()
               if k.endswith(":pending") and not k.startswith("nodestate")}
    assert pending == {}
    assert "Traceback" not in run.log and "cc-backend rejected" not in run.log
    print(f"{run.cluster.name}: {len(run.runs)} runs, starts answered 500/422: {run.resent}")
