"""The CI-sized scale profile itself (issue 11): clusterscale holds the queue and the churn
that ``scale_cluster`` promises, and sacct lists the queued jobs as a production queue's."""

from __future__ import annotations

import time

import pytest

from tests.integration.scale_bed import QUEUED_JOBS, RUNNING, ScaleBed
from tests.testbed.load import CHURN, QUEUED, read_record

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _squeue(bed: ScaleBed) -> dict[int, tuple[str, str]]:
    out = bed.cluster.run("squeue", "-h", "-t", "all", "-o", "%A %T %P")
    return {int(a): (st, part) for a, st, part in (line.split() for line in out.splitlines())}


def test_queue_and_churn_are_held(scale_cluster: ScaleBed):
    bed = scale_cluster
    queued = bed.submitted_ids(QUEUED)
    assert len(queued) == QUEUED_JOBS
    assert bed.hook_socket == "tcp:127.0.0.1:18890"
    assert bed.prefix == ("env", "SLURM_CONF=/etc/slurm-scale/slurm.conf")
    jobs = _squeue(bed)
    assert all(jobs.get(j) == ("PENDING", "queue") for j in queued)
    # the first churn jobs end within a second: wait for the steady state
    deadline = time.monotonic() + 30
    while True:
        running = [j for j, (st, part) in _squeue(bed).items()
                   if st == "RUNNING" and part == "batch"]
        if len(running) >= RUNNING * 0.9 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert RUNNING * 0.9 <= len(running) <= RUNNING * 1.5
    assert set(running) <= bed.submitted_ids(CHURN)


def _sacct_window(bed: ScaleBed, since: float) -> dict[int, list[str]]:
    out = bed.cluster.run("sacct", "-X", "-n", "-P", "--allusers", "-S",
                          time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since)),
                          "-E", "now", "-o", "JobIDRaw,State,Partition")
    return {int(r[0]): r[1:] for r in (line.split("|") for line in out.splitlines())}


def test_sacct_lists_the_queued_jobs_and_the_record_file_every_id(scale_cluster: ScaleBed):
    bed = scale_cluster
    since = min(s.submit for s in bed.submitted()) - 60
    queued = bed.submitted_ids(QUEUED)
    # slurmctld reports to slurmdbd asynchronously, behind whatever it still has to send
    # (50,000 cancellations of a benchmark run, say): wait until the records arrived
    deadline = time.monotonic() + 120
    while True:
        rows = _sacct_window(bed, since)
        churn = bed.submitted_ids(CHURN)
        started = {j for j in churn if j in rows and rows[j][0] != "PENDING"}
        if (queued <= rows.keys() and len(started) >= RUNNING * 0.9) or \
                time.monotonic() > deadline:
            break
        time.sleep(3)
    assert {j: rows.get(j) for j in queued} == {j: ["PENDING", "queue"] for j in queued}
    assert len(churn) > RUNNING  # the initial ones and some of the steady churn
    assert len(started) >= RUNNING * 0.9
    # the record file holds what the generator reported (and what it submitted since)
    reported = bed.submitted()
    recorded = read_record(bed.record)[:len(reported)]
    assert [(s.job_id, s.kind) for s in recorded] == [(s.job_id, s.kind) for s in reported]
    assert all(abs(a.submit - b.submit) < 0.001 for a, b in zip(recorded, reported, strict=True))
