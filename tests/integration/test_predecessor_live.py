"""ccadapter beside cc-slurm-adapter, the program it replaces (issue 38), on Slurm 25.05.8 (the
predecessor serves Slurm 24 and 25 only), each into its own real cc-backend 1.5.4; and the
switch from one to the other as a site makes it (README, "Migrating from cc-slurm-adapter").

The predecessor is built from its copied source (tests/testbed/predecessor) and run as its
README's unit runs it, its Prolog/Epilog client chained beside ccadapter's hook by the test
bed's wrapper (tests/predecessor.py).
"""

from __future__ import annotations

import time

import pytest

from ccadapter.runtime.lastrun import LastRun
from tests.bench.side_by_side import run
from tests.ccbackend import CcBackend
from tests.integration.expect import by_run, delivery_problems
from tests.integration.sync_scenario import delivered, submit_batch, wait_for
from tests.integration.workload import (
    Cluster,
    cancel_leftovers,
    controller_allocations,
    het_allocations,
    het_merged,
    sacct_truth,
)
from tests.predecessor import chain_hook, site_config, start_ccadapter, start_predecessor

pytestmark = pytest.mark.integration
START, STOP = "/api/jobs/start_job/", "/api/jobs/stop_job/"


@pytest.fixture
def c25(testbed) -> Cluster:
    cluster = testbed["25.05"]
    cancel_leftovers(cluster)
    return cluster


def test_side_by_side_the_same_workload_through_the_hook(c25, tmp_path):
    """Both products at once, the same 14 jobs (arrays, a het job, GPUs, cancels, a timeout,
    a job requeued while it runs): ccadapter holds every run with Slurm's fields, is right
    wherever the predecessor is, stops the requeued job's first run, and is not slower from
    Prolog (Epilog) to cc-backend."""
    sides = run(c25, tmp_path, legs=("both",), hook=True)
    ours, theirs = sides["ccadapter"], sides["cc-slurm-adapter"]
    print({k: {f: getattr(v, f) for f in ("wrong_runs", "requeued_first_run", "start_p50",
                                            "stop_p50", "cpu_self", "cpu_children",
                                            "rss_peak_mb")} for k, v in sides.items()})
    print("cc-slurm-adapter:", *theirs.problems, sep="\n  ")
    assert ours.problems == []
    assert ours.runs == theirs.runs > 10
    assert ours.requeued_first_run not in ("running", "absent")
    assert ours.start_p50 is not None and theirs.start_p50 is not None
    assert ours.start_p50 <= theirs.start_p50
    assert ours.stop_p50 <= theirs.stop_p50


def test_switch_from_cc_slurm_adapter_loses_nothing_and_sends_nothing_twice(c25, tmp_path):
    """cc-slurm-adapter runs and delivers; it is stopped while jobs run, some end and some
    start and end while neither runs; ccadapter starts with the same config file and lastRun
    file, its hook in the Prolog's place. Every run is in cc-backend once with Slurm's fields
    (but the hwthreads of a run the predecessor started without them: a start cannot be
    changed later), the runs it left running are stopped, and what ccadapter's first window
    finds that the predecessor had delivered (its runs within slurmWindowOverlap of lastRun,
    the starts of those still running) is not sent again: not one 422."""
    cluster = c25
    with CcBackend(tmp_path / "cc", [cluster], commit_interval="5s") as cc:
        conf = site_config(cc.url, cc.token, tmp_path / "site", poll=10)
        LastRun(tmp_path / "site" / "lastrun").set(time.time() - 5)
        old = start_predecessor(cluster, conf, tmp_path / "cc-slurm-adapter.log")
        chain_hook(cluster, "cc-slurm-adapter", conf)
        new = None
        try:
            time.sleep(2)
            done = submit_batch(cluster, "before", 4)  # delivered by the predecessor alone
            wait_for(lambda: delivered(cc, done), 120, "predecessor: batch not stopped")
            long = [_sbatch(cluster, f"long{i}", 45) for i in range(2)]
            short = [_sbatch(cluster, f"short{i}", 12) for i in range(2)]
            wait_for(lambda: _started(cc) >= set(long + short), 120,
                     "predecessor: running jobs not started")
            assert old.stop() == 0  # systemctl stop cc-slurm-adapter
            chain_hook(cluster, None)
            switched = time.time()
            unseen = submit_batch(cluster, "between", 2)  # start and end while none runs
            wait_for(lambda: _ended(cluster, short + unseen), 90, "jobs did not end")
            chain_hook(cluster, "ccadapter", conf)
            new = start_ccadapter(cluster, conf, tmp_path / "ccadapter.log")
            after = submit_batch(cluster, "after", 2)
            ids = done + long + short + unseen + after
            wait_for(lambda: delivered(cc, ids), 180, "ccadapter: runs not stopped")
        finally:
            chain_hook(cluster, None)
            if new is not None:
                assert new.stop() == 0
            old.stop()
        cc.wait_committed()
        truth = het_merged(sacct_truth(cluster, ids))
        allocs = het_allocations(truth, controller_allocations(cluster))
        problems = delivery_problems(cluster.name, truth, by_run(cc.started(cluster.name)),
                                     by_run(cc.stopped(cluster.name)), allocs)
        by_predecessor = {ex.body["jobId"] for ex in cc.requests(START)
                          if ex.time < switched and ex.status == 201}
        ours = [p for p in problems if int(p.split()[1].rstrip(":")) not in by_predecessor]
        theirs = [p for p in problems if p not in ours]
        print("left by cc-slurm-adapter:", *theirs, sep="\n  ")
        assert ours == []
        # what the predecessor got wrong in a start stays: its hwthreads only
        assert all("numHwthreads" in p or ("hosts" not in p and "CPU" in p) for p in theirs), \
            theirs
        sent_after = [ex for ex in cc.requests() if ex.time >= switched and ex.body
                      and ex.path in (START, STOP) and ex.body["jobId"] in ids]
        again = [(ex.path, ex.body["jobId"], ex.status) for ex in sent_after
                 if ex.status not in (200, 201)]
        assert again == []
        # the runs it left running, and every one since, were stopped by ccadapter
        assert {ex.body["jobId"] for ex in sent_after if ex.path == STOP
                and ex.status == 200} == set(long + short + unseen + after)
        log = (tmp_path / "ccadapter.log").read_text()
        assert "Traceback" not in log and cc.token not in log


def _sbatch(cluster: Cluster, name: str, seconds: int) -> int:
    out = cluster.run("sbatch", "--parsable", "-J", name, "-o", "/dev/null", "--wrap",
                      f"sleep {seconds}")
    return int(out.strip().split(";")[0])


def _started(cc: CcBackend) -> set[int]:
    return {j["jobId"] for j in cc.jobs()}


def _ended(cluster: Cluster, ids: list[int]) -> bool:
    rows = sacct_truth(cluster, ids)
    return len(rows) == len(ids) and all(r["end"] for r in rows.values())

