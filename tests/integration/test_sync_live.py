"""Issue 3 on real Slurm: every started job reaches the real cc-backend 1.5.4 exactly once
as started and once as stopped, whatever fails between (read back through its API)."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import CcBackend, scheduler_state
from tests.conftest import HEAVY_VERSIONS
from tests.energy import UNSET
from tests.integration.sync_scenario import (
    ccadapter,
    exactly_once,
    resilience,
    submit_batch,
    wait_for,
    write_config,
)
from tests.integration.workload import listed_ended

pytestmark = pytest.mark.integration


def test_sync_once_delivers_the_workload_exactly_once(workload, tmp_path):
    cluster, sub = workload.sub.cluster, workload.sub
    with CcBackend(tmp_path / "cc-backend", [cluster]) as cc:
        cfg = write_config(cluster, cc, tmp_path)
        LastRun(tmp_path / "lastrun").set(sub.submitted_at - 5)
        dry = ccadapter("sync", "--once", "--dry-run", "--config", str(cfg))
        assert dry.returncode == 0, dry.stderr
        assert [r for r in cc.requests() if r.method != "GET"] == []  # sends nothing
        events = [json.loads(ln) for ln in dry.stdout.splitlines() if '"event"' in ln]
        assert {e["jobId"] for e in events if e["event"] == "start"} >= set(sub.ids["excl"])
        assert LastRun(tmp_path / "lastrun").get() == pytest.approx(sub.submitted_at - 5)
        for _ in range(2):  # the second cycle finds everything delivered: no new request
            res = ccadapter("sync", "--once", "--config", str(cfg))
            assert res.returncode == 0, res.stderr
        assert exactly_once(cc, cluster, sub.all_ids()) == []
        # not even a 422 the second time (other tests' requeued jobs, whose later run
        # cc-backend refuses, may share the window: only this workload's jobs are counted)
        ours = set(sub.all_ids())
        starts = [r for r in cc.requests("/api/jobs/start_job/")
                  if r.body and r.body["jobId"] in ours]
        assert len(starts) == len([j for j in cc.started(cluster.name) if j["jobId"] in ours])
        assert "[ERROR]" not in cc.log(), cc.log()[-3000:]
        assert node_states_held(cc, cluster) == []


def node_states_held(cc: CcBackend, cluster) -> list[str]:
    """cc-backend holds every node of the cluster with the state and counts of the last node
    states it took (its GraphQL ``nodes`` and its node_state rows), reduced as cc-backend
    reduces Slurm's states (tests/ccbackend.py ``scheduler_state``)."""
    posts = [e.body for e in cc.requests("/api/nodestate/") if e.status == 200]
    if not posts:
        return ["no node state was sent"]
    sent = {n["hostname"]: n for n in posts[-1]["nodes"]}
    stored = cc.node_states(cluster.name)
    problems = [] if set(stored) == set(sent) == set(cluster.nodes) else [
        f"nodes: cc-backend {sorted(stored)}, sent {sorted(sent)}, Slurm {cluster.nodes}"]
    for host, node in sent.items():
        got = stored.get(host, {})
        want = {"schedulerState": scheduler_state("+".join(node["states"])),
                "cpus_allocated": node["cpusAllocated"], "jobs_running": node["jobsRunning"],
                "memory_allocated": node["memoryAllocated"],
                "gpus_allocated": node["gpusAllocated"]}
        problems += [f"{host} {k}: cc-backend {got.get(k)!r}, sent {v!r}"
                     for k, v in want.items() if got.get(k) != v]
    return problems


@pytest.fixture(scope="session")
def resilience_runs(testbed, tmp_path_factory):
    outage = float(os.environ.get("CCADAPTER_OUTAGE_SECONDS", "120"))
    with ThreadPoolExecutor(len(HEAVY_VERSIONS)) as pool:
        futures = {v: pool.submit(resilience, testbed[v], tmp_path_factory.mktemp(f"res{v}"),
                                  outage) for v in HEAVY_VERSIONS}
        runs = {v: f.result() for v, f in futures.items()}
    yield runs
    for run in runs.values():
        run.cc.stop()


@pytest.mark.parametrize("version", HEAVY_VERSIONS)
def test_daemon_survives_outage_kill_and_slurmdbd_stop(resilience_runs, version):
    run = resilience_runs[version]
    assert exactly_once(run.cc, run.cluster, run.ids, run.allocs) == []
    assert run.exit_code == 0, run.log[-2000:]
    assert run.cc.token not in run.log
    assert "Traceback" not in run.log


@pytest.mark.parametrize("cluster", HEAVY_VERSIONS, indirect=True)
def test_no_energy_is_sent_where_slurm_gathers_none(cluster, tmp_path):
    """Issue 14, item 5, on the real test bed, which has no energy plugin
    (AcctGatherEnergyType unset): every job record of ``sacct --json -X`` carries the energy
    TRES unset, as tests/energy.py assumes for the records it gives energy (null on 22.05,
    -2 later), and ``sync --once`` says at start that no energy is gathered, sends starts
    and stops and no edit_meta."""
    since = time.time() - 300
    ids = submit_batch(cluster, "noenergy", 2)
    # ended as the one window of `sync --once` lists them (22.05 may lag a few seconds)
    wait_for(lambda: listed_ended(cluster, ids, since) == set(ids), 90, "jobs did not end")
    doc = json.loads(cluster.run("sacct", "--json", "-X", "--allusers", "-j",
                                 ",".join(map(str, ids))))
    energy = [t for r in doc["jobs"] for t in r["tres"]["allocated"] if t["type"] == "energy"]
    assert [t["count"] for t in energy] == [UNSET[cluster.short]] * len(ids)
    assert all(t["id"] == 3 for t in energy)
    with CcBackend(tmp_path / "cc-backend", [cluster]) as cc:
        cfg = write_config(cluster, cc, tmp_path)
        LastRun(tmp_path / "lastrun").set(since)
        res = ccadapter("--log-level", "info", "sync", "--once", "--config", str(cfg))
        assert res.returncode == 0, res.stderr
        assert "energy: slurmctld gathers none (AcctGatherEnergyType)" in res.stderr
        assert {b["jobId"] for b in cc.stopped()} >= set(ids)
        # (a requeued job of another test may share the window: its later run's summary
        # goes to its first run's metaData, which is not energy)
        assert [r for r in cc.requests("/api/jobs/edit_meta/")
                if r.body and r.body.get("jobId") in ids] == []
        assert all("energy" not in (j["metaData"] or {}) for j in cc.jobs(cluster.name))
