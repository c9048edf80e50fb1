"""Each row of the lifecycle matrix (tests/integration/test_lifecycle_live.py, TESTING.md) as
every release records it (tests/testbed/record_lifecycle.py: ``sacct --json`` and
``scontrol -d show job`` once the row's job ended), read as ccadapter reads it: the runs each
job id had, in cc-backend's states, without a cluster."""

from __future__ import annotations

from collections import defaultdict

import pytest

from ccadapter.model import Job
from ccadapter.slurm.formats import format_for
from ccadapter.slurm.formats.records import ParseContext
from ccadapter.slurm.formats.scontrol import parse_scontrol_jobs
from ccadapter.slurm.formats.text import version_from_meta
from ccadapter.slurm.join import build_job
from ccadapter.slurm.resize import fold_resized
from tests.conftest import VERSIONS, fixture_json, fixture_text

# row -> for each of its job ids, in id order, the states of the runs it had ("" for a record
# that never started: nothing is sent of it)
RUNS = {
    "resize": [["completed"]],
    "suspend": [["completed"]],
    "hold": [["completed"]],
    "timelimit": [["completed"]],
    "kill": [["cancelled"]],
    "never": [[""]],
    "partition": [["completed"]],
    "deadline": [[""]],
    # the tasks cancelled while they waited (one record, the array's own id), task 0, task 1
    "array": [[""], ["completed"], ["cancelled"]],
    "preempt-requeue": [["preempted", "completed"]],  # the later run: refused by cc-backend
    "preempt-cancel": [["preempted"]],
    "preempt-suspend": [["completed"]],
    "urgent": [["completed"]],
    "node-fail": [["node_fail", "completed"]],
    "prolog-fails": [["preempted", "completed"]],  # REQUEUED: no script ran
    "requeue-hold": [["preempted", "completed"]],
}


def runs(version: str, row: str) -> dict[int, list[Job]]:
    doc = fixture_json(version, f"lifecycle/{row}.json")
    ver = version_from_meta(doc, "sacct --json")
    parser = format_for(ver, "sacct --json")
    recs = [parser.parse_sacct_job(r, ParseContext(str(ver), "sacct --json"))
            for r in doc["jobs"]]
    by_id: dict[int, list[Job]] = defaultdict(list)
    for job in sorted((build_job(r, None, "", []) for r in fold_resized(recs)),
                      key=lambda j: (j.job_id, j.start_time)):
        by_id[job.job_id].append(job)
    return dict(sorted(by_id.items()))


def cases():
    for version in VERSIONS:
        for row in RUNS:
            yield pytest.param(version, row, id=f"{version}-{row}")


@pytest.mark.parametrize(("version", "row"), list(cases()))
def test_each_release_records_each_lifecycle_as_these_runs(version, row):
    got = [[j.cc_state.value if j.started and j.cc_state else "" for j in jobs]
           for jobs in runs(version, row).values()]
    assert got == RUNS[row]
    for jobs in runs(version, row).values():
        for job in jobs:
            assert not job.started or (job.finished and job.end_time >= job.start_time)


@pytest.mark.parametrize("version", VERSIONS)
def test_what_the_rows_change_is_in_the_records(version):
    (resized,) = runs(version, "resize").values()
    assert resized[0].num_nodes == 2  # the allocation it started with
    (moved,) = runs(version, "partition").values()
    assert moved[0].partition == "gpu"
    (failed,) = runs(version, "node-fail").values()
    assert failed[0].end_time <= failed[1].start_time  # the requeue waited for the node


@pytest.mark.parametrize(("version", "row"), list(cases()))
def test_slurmctld_still_shows_each_rows_job_once_it_ended(version, row):
    jobs, errors = parse_scontrol_jobs(fixture_text(version, f"lifecycle/{row}-scontrol.txt"),
                                       ParseContext(version, "scontrol -d show job"))
    assert not errors and jobs
    ids = set(runs(version, row))
    assert ids & set(jobs)
    for ctl in jobs.values():
        assert ctl.state.split()[0] in {"COMPLETED", "CANCELLED", "FAILED", "PREEMPTED",
                                        "DEADLINE", "NODE_FAIL", "TIMEOUT"}, ctl.state
