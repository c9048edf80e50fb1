"""A job requeued while it runs (issue 35, item 6), on real Slurm into the real cc-backend.

Seen beside cc-slurm-adapter on 25.05: ccadapter never stopped the first run (from 23.11 on
sacct's JSON writes its state ["PENDING", "REQUEUED"], which read as a run that never ran),
cc-backend refused the second run's start with 422 (it holds one run of a job id a day),
ccadapter counted that as delivered, its stop was answered 404 and parked as rejected, and
cc-cache sent the start again at every cycle.

Now: the first run is stopped as Slurm ended it (REQUEUED, preempted for cc-backend); the
second run, which cc-backend 1.5.4 will not hold, is said once, counted in status
(``notHeld``), its start sent once and never again, no stop sent for it (issue 46), and its
times, state and hosts go into the first job's metaData (``requeuedRun.START``); nothing is
rejected.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ccadapter.outbox import Outbox, admin
from ccadapter.outbox.queue import NOT_HELD_ROWS
from tests.ccbackend import START, STOP, CcBackend
from tests.conftest import HEAVY_VERSIONS
from tests.integration.conftest import each_at_once
from tests.integration.sync_scenario import ccadapter, wait_for
from tests.integration.test_hook_live import start_daemon
from tests.integration.workload import Cluster

pytestmark = pytest.mark.integration


def sacct_runs(cluster: Cluster, job: int) -> list[tuple[int, int, str]]:
    out = cluster.run("sacct", "-X", "-n", "-P", "--duplicates", "-j", str(job), "-o",
                      "Start,End,State", "--noconvert")
    runs = []
    for line in out.splitlines():
        start, end, state = line.split("|")
        runs.append((start, end, state))
    return runs


def requeue_run(cluster: Cluster, tmp: Path) -> dict:
    with CcBackend(tmp / "cc", [cluster], commit_interval="5s") as cc:
        daemon = start_daemon(cluster, cc, tmp, poll=10)
        try:
            out = cluster.run("sbatch", "--parsable", "-J", "requeued", "-o", "/dev/null",
                              "--wrap", "sleep 20")
            job = int(out.strip().split(";")[0])
            time.sleep(6)
            cluster.run("scontrol", "requeue", str(job))
            wait_for(lambda: [s for _, _, s in sacct_runs(cluster, job)][-1:] == ["COMPLETED"],
                     400, "the requeued job's second run did not end")
            first = next(j for j in cc.jobs(cluster.name) if j["jobId"] == job)
            wait_for(lambda: "requeuedRun." in json.dumps(
                cc.job(first["id"]).get("metaData") or {}), 120,
                "the second run's summary did not reach the first job's metaData")
            held = [j for j in cc.jobs(cluster.name) if j["jobId"] == job]
            meta = cc.job(held[0]["id"]).get("metaData") or {}
        finally:
            daemon.terminate()
        status = json.loads(ccadapter("status", "--format", "json", "--config",
                                      str(tmp / "config.json")).stdout)
        again = ccadapter("sync", "--once", "--only", "cc-cache", "--config",
                          str(tmp / "config.json"))
        starts = [r for r in cc.requests(START) if r.body and r.body["jobId"] == job]
        stops = [r for r in cc.requests(STOP) if r.body and r.body["jobId"] == job]
        box = Outbox.reader(tmp / "state" / "outbox.sqlite")
        rejected = admin.rejected(box.store)
        with box.store.read() as db:  # the refused runs: the daemon's window may hold others'
            not_held = [j for (j,) in db.execute(
                f"SELECT job_id FROM events WHERE {NOT_HELD_ROWS}").fetchall()]
        box.close()
    return {"job": job, "held": held, "meta": meta, "status": status, "again": again,
            "starts": starts, "stops": stops, "rejected": rejected, "not_held": not_held}


@pytest.fixture(scope="module")
def requeued(testbed, tmp_path_factory) -> dict:
    clusters = {v: testbed[v] for v in HEAVY_VERSIONS}
    return each_at_once(requeue_run, clusters, tmp_path_factory, "requeue")


@pytest.mark.parametrize("version", HEAVY_VERSIONS)
def test_a_requeued_jobs_first_run_is_stopped_and_the_second_in_its_metadata(requeued,
                                                                            version):
    run = requeued[version]
    if isinstance(run, Exception):
        raise run
    (first,) = run["held"]  # cc-backend holds one job for the two runs
    assert first["jobState"] == "preempted", first
    (key,) = [k for k in run["meta"] if k.startswith("requeuedRun.")]
    assert ", completed, on " in run["meta"][key]
    assert run["rejected"] == []
    assert run["not_held"].count(run["job"]) == 1  # its second run, once
    assert run["status"]["outbox"]["notHeld"] == len(run["not_held"])
    assert run["again"].returncode == 0, run["again"].stderr
    summary = [json.loads(ln) for ln in run["again"].stdout.splitlines()
               if ln.startswith('{"reconciler"')]
    assert summary and summary[0]["reopened"] == 0  # cc-cache sends the second start no more
    # issue 46: the second run's start is sent once (422) and it is never stopped there: its
    # stop would be answered 404 and the start it sends first 422 again
    assert [r.status for r in run["starts"]] == [201, 422], run["starts"]
    assert [(r.status, r.body["startTime"]) for r in run["stops"]] == [
        (200, first["startTime"])], run["stops"]
    print(f"\n{version}: job {run['job']}: first run {first['jobState']}, "
          f"{key} = {run['meta'][key]!r}; starts sent {[r.status for r in run['starts']]}")
