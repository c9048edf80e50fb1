"""The end of a requeued run, as every release's slurmctld shows it just after the requeue
(tests/testbed/record_requeue.py): its record is the next run's, ``Restarts=1``, PENDING or
COMPLETING with the requeue moment as StartTime (22.05, 23.02, 23.11, 25.11 while the epilog
runs). Built into a Job that record is no run of the job; the ended one is slurmdbd's."""

from __future__ import annotations

import dataclasses
from datetime import UTC

import pytest

from ccadapter.errors import SlurmCommandError
from ccadapter.outbox import NewEvent, Outbox
from ccadapter.prep.requeued import ended_runs, requeued_record
from ccadapter.slurm.collector import QueryResult
from ccadapter.slurm.formats import format_for
from ccadapter.slurm.formats.records import ParseContext
from ccadapter.slurm.formats.scontrol import parse_scontrol_jobs
from ccadapter.slurm.formats.text import version_from_meta
from ccadapter.slurm.join import build_job, controller_job
from tests.conftest import fixture_json, fixture_text

VERSIONS = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")


def held(version: str, name: str = "scontrol-requeued.txt"):
    """slurmctld's record of the one job of a recording (by default right after ``scontrol
    requeue``), and that record as a Job."""
    jobs, errors = parse_scontrol_jobs(fixture_text(version, name),
                                       ParseContext(version, "scontrol -d show job"))
    assert not errors
    (ctl,) = jobs.values()
    job = controller_job(ctl, "c", UTC, [])
    assert job is not None
    return ctl, job


def runs(version: str):
    """slurmdbd's records of the same job once its second run ended, as Jobs."""
    doc = fixture_json(version, "sacct-requeued.json")
    ver = version_from_meta(doc, "sacct --json")
    parser = format_for(ver, "sacct --json")
    return sorted((dataclasses.replace(build_job(parser.parse_sacct_job(
        r, ParseContext(str(ver), "sacct --json")), None, "", []), cluster="c")
        for r in doc["jobs"]), key=lambda j: j.start_time)


class Collector:
    def __init__(self, found, error: Exception | None = None):
        self.found, self.error, self.asked = found, error, []

    def jobs_by_id(self, ids, cluster=None, starts=None):
        self.asked.append((list(ids), starts))
        if self.error:
            raise self.error
        return QueryResult(self.found, None)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_release_counts_the_requeue_and_shows_the_next_run(version):
    ctl, job = held(version)
    first = runs(version)[0]
    assert ctl.restarts == job.restarts == 1
    assert not job.finished
    assert job.start_time != first.start_time  # not the run that ended
    if job.started:  # COMPLETING with the nodes still held: it would be sent as a start
        assert job.start_time > first.start_time


@pytest.mark.parametrize("version", VERSIONS)
def test_the_record_is_taken_for_a_requeue_unless_its_start_is_stored(version, tmp_path):
    _, job = held(version)
    first = runs(version)[0]
    box = Outbox(tmp_path / "o.sqlite")
    start = {"jobId": job.job_id, "startTime": first.start_time}
    box.enqueue([NewEvent("c", job.job_id, first.start_time, "start", start)])
    assert requeued_record(job, box)  # the prolog announced the first run only
    assert not requeued_record(dataclasses.replace(job, restarts=0), box)
    if job.started:  # a later run's own end: its prolog stored its start
        box.enqueue([NewEvent("c", job.job_id, job.start_time, "start", start)])
        assert not requeued_record(job, box)
    box.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_the_ended_run_comes_from_slurmdbd_without_slurmctlds_allocation(version):
    _, job = held(version)
    found = runs(version)
    collector = Collector(found)
    got, unended = ended_runs(collector, [job])
    assert got == found and unended == set()
    assert collector.asked == [([job.job_id], ())]  # no allocation asked: it is the next run's


@pytest.mark.parametrize("version", VERSIONS)
def test_a_requeue_slurmdbd_does_not_show_ended_yet_is_asked_again(version):
    _, job = held(version)
    first = runs(version)[0]
    still = dataclasses.replace(first, state="RUNNING", end_time=0)
    assert ended_runs(Collector([still]), [job]) == ([still], {job.job_id})
    assert ended_runs(Collector([]), [job]) == ([], {job.job_id})


def test_slurmdbd_unreachable_asks_again(caplog):
    _, job = held("24.11")
    error = SlurmCommandError("sacct", 1, "slurmdbd down")
    assert ended_runs(Collector([], error), [job]) == ([], {job.job_id})
    assert "asked again" in caplog.text
