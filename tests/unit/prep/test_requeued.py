"""The end of a requeued run, as every release's slurmctld shows it just after the requeue
(tests/testbed/record_requeue.py): its record is the next run's, ``Restarts=1``, PENDING or
COMPLETING with the requeue moment as StartTime (22.05, 23.02, 23.11, 25.11 while the epilog
runs). Built into a Job that record is no run of the job; the ended one is slurmdbd's."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC

import pytest

from ccadapter.errors import SlurmCommandError
from ccadapter.outbox import NewEvent, Outbox
from ccadapter.prep.fastpath import FastPath
from ccadapter.prep.messages import HookEvent, HookMessage
from ccadapter.prep.requeued import (
    ended_runs,
    read_from_slurmdbd,
    requeued_before_asked,
    requeued_record,
)
from ccadapter.retry import RetryPolicy
from ccadapter.slurm.collector import Collector as Collector_
from ccadapter.slurm.collector import QueryResult
from ccadapter.slurm.formats import format_for
from ccadapter.slurm.formats.records import ParseContext
from ccadapter.slurm.formats.scontrol import parse_scontrol_jobs
from ccadapter.slurm.formats.text import version_from_meta
from ccadapter.slurm.join import build_job, controller_job
from tests.conftest import collector_settings, fixture_json, fixture_text
from tests.fakeslurm import RecordedSlurm

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


@pytest.mark.parametrize("version", VERSIONS)
def test_a_record_requeued_before_the_prologs_start_was_asked_is_slurmdbds(version, tmp_path):
    """A failed PrologSlurmctld has slurmctld requeue the job before the fast path asks
    about the start its prolog announced; the record it is shown then is the one recorded
    right after a requeue. Its runs come from slurmdbd; a running later run, or a job
    never requeued, stays slurmctld's."""
    _, job = held(version)
    box = Outbox(tmp_path / "o.sqlite")
    assert requeued_before_asked(job)
    assert read_from_slurmdbd(job, box, {HookEvent.START})
    assert not read_from_slurmdbd(dataclasses.replace(job, restarts=0), box, {HookEvent.START})
    assert not read_from_slurmdbd(dataclasses.replace(job, state="RUNNING"), box,
                                  {HookEvent.START})
    box.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_prologs_start_met_by_a_requeue_sends_the_run_that_ended_only(version, tmp_path):
    """Before: where the record is COMPLETING with the nodes the start was built from it, a
    run at the requeue moment that cc-backend held running for ever beside the real one (the
    24.11 matrix's prolog-fails row, once); where it is PENDING nothing was sent until the
    epilog or the poll."""
    ctl, job = held(version)
    found = {run.start_time for run in runs(version)}  # recorded once both runs ended
    assert ctl.start_time not in found
    slurm = RecordedSlurm(version, fixture_json(version, "sacct-requeued.json"),
                          fixture_text(version, "scontrol-requeued.txt"))
    box = Outbox(tmp_path / "o.sqlite")
    woken = threading.Event()
    fast = FastPath(Collector_(slurm, collector_settings(), tz=UTC), box, woken.set,
                    retry=RetryPolicy(0.05, 0.05, 3)).start()
    try:
        fast.submit(HookMessage(job.job_id, HookEvent.START, None))
        assert woken.wait(5)
    finally:
        fast.stop()
    with box.store.read() as db:
        got = db.execute("SELECT kind, start_time FROM events WHERE job_id = ? ORDER BY id",
                         (job.job_id,)).fetchall()
    box.close()
    assert sorted(got) == sorted((kind, start) for start in found for kind in ("start", "stop"))
