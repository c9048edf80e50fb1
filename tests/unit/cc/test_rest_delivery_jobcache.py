"""ccadapter's delivery against cc-backend 1.5's job cache (issue 13, item 1), through the
real client, outbox and deliverer to the stand-in with a commit interval.

cc-backend v1.5.4 answers a start sent again while its run is still cached with 500
(internal/api/job.go:748-776: the duplicate check reads the job table only, the insert breaks
job_cache's UNIQUE), and with 422 once the commit worker moved the run into the job table.
ccadapter counts either answer as delivered (the run is stored: in the cache or in the job
table), never as rejected, and sends no second start with another startTime.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, replace
from zoneinfo import ZoneInfo

import pytest

from ccadapter.cc.client import CcClient
from ccadapter.cc.rest_delivery import RestDelivery
from ccadapter.daemon.deliverer import Deliverer, DeliveryStats
from ccadapter.model import EventKind, Job
from ccadapter.outbox import DeliveryStatus, NewEvent, Outbox, admin
from ccadapter.reconcilers.cc_cache import CcCache
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.slurm.collector import Collector, Listing, QueryResult
from ccadapter.slurm.formats.listing import RunStamp
from tests.conftest import collector_settings, fixture_json, fixture_text
from tests.fakeslurm import RecordedSlurm
from tests.standin.ccbackend import CcBackendStandin

TOKEN = "secret-jwt-value"
T = 1_700_000_000
HOUR = 3600.0  # the stand-in's commit worker never runs by itself here: tests commit by hand


def start_body(job: int = 1, t: int = T) -> dict:
    return {"jobId": job, "cluster": "c", "user": "u", "project": "p", "startTime": t,
            "numNodes": 1, "numHwthreads": 1, "resources": [{"hostname": "n1"}]}


def stop_body(job: int = 1, t: int = T) -> dict:
    return {"jobId": job, "cluster": "c", "startTime": t, "stopTime": t + 60,
            "jobState": "completed"}


def start_event(job: int = 1, t: int = T) -> NewEvent:
    return NewEvent("c", job, t, EventKind.START, start_body(job, t))


def stop_event(job: int = 1, t: int = T) -> NewEvent:
    return NewEvent("c", job, t, EventKind.STOP,
                    {"stop": stop_body(job, t), "start": start_body(job, t)})


@dataclass
class Rig:
    standin: CcBackendStandin
    client: CcClient

    def deliverer(self, box: Outbox) -> Deliverer:
        return Deliverer(box.queue, RestDelivery(self.client, held_instead=box.held_instead),
                         workers=2)

    def drain(self, box: Outbox) -> DeliveryStats:
        deliverer = self.deliverer(box)
        try:
            return deliverer.run_once()
        finally:
            deliverer.close()


@pytest.fixture
def rig():
    with CcBackendStandin(TOKEN, clusters=["c"], commit_interval=HOUR) as standin:
        # the daemon's quick retries (2): a cached duplicate's 500 outlasts them
        client = CcClient(standin.url, TOKEN, read_timeout=5)
        yield Rig(standin, client)
        client.close()


def status_of(box: Outbox, kind: str) -> list[tuple[str, str | None]]:
    return [(e["status"], e["error"]) for e in admin.list_events(box.store, kind=kind)]


def test_start_sent_again_while_cached_counts_as_delivered_and_its_stop_follows(rig, tmp_path):
    """The daemon was killed after cc-backend took its start but before the outbox recorded
    it (or a read timeout hid the 201): the restarted daemon sends the start again. cc-backend
    answers 500 naming its job cache's UNIQUE constraint: the run is there, so the start is
    delivered at once (no retries until the commit) and the stop goes right after."""
    path = tmp_path / "outbox.sqlite"
    box = Outbox(path)
    box.enqueue([start_event()])
    box.close()
    shutil.copyfile(path, tmp_path / "before.sqlite")  # the state the kill leaves behind
    first = Outbox(path)
    assert rig.drain(first).delivered == 1  # 201, into cc-backend's job cache
    first.close()

    again = Outbox(tmp_path / "before.sqlite")  # the restarted daemon's outbox
    again.enqueue([stop_event()])
    stats = rig.drain(again)
    assert (stats.delivered, stats.rejected) == (2, 0)
    assert status_of(again, EventKind.START) == [(DeliveryStatus.DELIVERED, None)]
    assert status_of(again, EventKind.STOP) == [(DeliveryStatus.DELIVERED, None)]
    assert rig.standin.count("/api/jobs/start_job/", 500) == 1  # one answer, no flood
    assert admin.stats(again.store)["rejected"] == 0
    assert rig.standin.commit_now() == 0  # moved by its stop already
    (job,) = rig.standin.jobs()
    assert (job["jobId"], job["startTime"], job["jobState"]) == (1, T, "completed")
    assert rig.standin.cached() == []
    again.close()


def test_stop_of_a_cached_start_is_delivered_without_waiting_for_the_commit(rig, tmp_path):
    box = Outbox(tmp_path / "o.sqlite")
    box.enqueue([start_event(), stop_event()])
    assert rig.drain(box).delivered == 2  # stop_job finds the cached row first
    assert [(r.path, r.status) for r in rig.standin.requests()] == [
        ("/api/jobs/start_job/", 201), ("/api/jobs/stop_job/", 200)]
    assert rig.standin.commit_now() == 0  # moved by its stop already
    assert [j["jobState"] for j in rig.standin.jobs()] == ["completed"]
    box.close()


def test_stop_404_delivers_the_start_then_finds_it_in_the_cache(rig, tmp_path):
    box = Outbox(tmp_path / "o.sqlite")
    box.enqueue([stop_event()])  # the start was compacted long ago; cc-backend lost it
    stats = rig.drain(box)
    assert (stats.delivered, stats.rejected) == (1, 0)
    assert [(r.path, r.status) for r in rig.standin.requests()] == [
        ("/api/jobs/stop_job/", 404), ("/api/jobs/start_job/", 201),
        ("/api/jobs/stop_job/", 200)]
    assert [j["jobState"] for j in rig.standin.jobs()] == ["completed"]
    box.close()


def test_two_start_times_of_one_run_become_two_jobs_while_cached(rig, tmp_path):
    """Why a run must never be sent with two startTimes: the outbox keys events by
    (cluster, jobId, startTime, kind), so two readings of one run are two runs to it, and
    cc-backend 1.5 stores both while the first is cached (its duplicate check reads the job
    table only). See tests/unit/test_start_time_sources.py for where readings could differ."""
    box = Outbox(tmp_path / "o.sqlite")
    box.enqueue([start_event(t=T), start_event(t=T + 3600)])  # e.g. a zone apart
    assert rig.drain(box).delivered == 2
    rig.standin.commit_now()
    assert sorted(j["startTime"] for j in rig.standin.jobs()) == [T, T + 3600]
    box.close()


def test_a_run_refused_for_another_of_its_job_id_goes_into_that_ones_metadata(rig, tmp_path):
    """The other order: the first reading is committed when the second comes. cc-backend
    answers the second start 422 (within a day of the first) and holds no run at its
    startTime (issue 35, item 6): the start is noted as not held, not sent again, and the
    second run's stop puts its times, state and hosts into the first job's metaData; no
    event is rejected."""
    box = Outbox(tmp_path / "o.sqlite")
    box.enqueue([start_event(t=T)])
    rig.drain(box)
    rig.standin.commit_now()
    box.enqueue([start_event(t=T + 3600), stop_event(t=T + 3600)])
    stats = rig.drain(box)
    assert (stats.delivered, stats.rejected) == (2, 0)
    ((state, error),) = status_of(box, EventKind.STOP)
    assert state == DeliveryStatus.DELIVERED and error.startswith("not held: ")
    assert f"metaData.requeuedRun.{T + 3600}" in error
    (job,) = rig.standin.jobs()
    assert (job["startTime"], job["jobState"]) == (T, "running")
    assert job["metaData"][f"requeuedRun.{T + 3600}"].endswith(", completed, on n1")
    assert box.not_held("c", [(1, T + 3600), (1, T)]) == {(1, T + 3600)}
    # issue 46: the refused run costs one start (422) and the edit, no stop (404) and no
    # second start
    assert rig.standin.count("/api/jobs/start_job/", 422) == 1
    assert rig.standin.count("/api/jobs/stop_job/") == 0
    assert box.held_instead("c", 1, T + 3600) == T and box.held_instead("c", 1, T) is None
    box.close()


def test_requeued_runs_not_held_are_said_once_an_hour_with_a_count(rig, tmp_path, caplog):
    """A site that requeues hundreds of jobs a day must not get a warning for each (issue
    37: the month-of-life run logged 450 lines a quiet day, 2 per requeued job): the first
    is said, the others within the hour are counted into the next line an hour later; each
    is still noted with its event."""
    now = [float(T)]
    box = Outbox(tmp_path / "o.sqlite")
    deliver = RestDelivery(rig.client, clock=lambda: now[0])
    jobs = range(1, 11)
    box.enqueue([start_event(job=j, t=T) for j in jobs])
    Deliverer(box.queue, deliver, workers=2).run_once()
    rig.standin.commit_now()

    def requeue(ids: range, t: int) -> None:
        box.enqueue([start_event(job=j, t=t) for j in ids])
        deliverer = Deliverer(box.queue, deliver, workers=2)
        try:
            deliverer.run_once()
        finally:
            deliverer.close()

    with caplog.at_level(logging.INFO):
        requeue(jobs[:6], T + 600)
        now[0] += 3601
        requeue(jobs[6:], T + 600)
    said = [r.getMessage() for r in caplog.records if "not held: " in r.getMessage()]
    assert len(said) == 2, said
    assert "more such run(s)" not in said[0] and "(5 more such run(s)" in said[1]
    noted = [e for _, e in status_of(box, EventKind.START) if (e or "").startswith("not held")]
    assert len(noted) == 10
    box.close()


# --- cc-cache against the job cache (issue 13: "cc-cache does not resend what it started
# within the last commit interval"): at daemon start, a start still in cc-backend's cache (so
# not listed) is never duplicated and never rejected, and its stop gets through.


class OneRunningJob:
    """The collector queries cc-cache makes (slurmctld's running job ids, then the listing
    and the details of some ids), answered for one running job."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.slurmctld = self

    def running_ids(self, cluster: str | None = None) -> set[int]:
        return {self.job.job_id}

    def stamps_of(self, job_ids, cluster: str | None = None) -> Listing:
        job = self.job
        return Listing([RunStamp(job.job_id, job.start_time, 0, "RUNNING",
                                 ",".join(r.hostname for r in job.resources))]
                       if job.job_id in job_ids else [])

    def iter_jobs(self, ids, cluster=None, starts=None, known=None):
        yield QueryResult([self.job] if self.job.job_id in ids else [], None)


def running_job() -> Job:
    """A job slurmctld showed running (the recorded 24.11 busy snapshot)."""
    busy = fixture_text("24.11", "testbed/scontrol-d-busy.txt")
    gpu = fixture_json("24.11", "testbed/workload.json")["ids"]["gpujob"][0]
    runner = RecordedSlurm("24.11", fixture_json("24.11", "testbed/sacct-window.json"), busy)
    collector = Collector(runner, collector_settings(), tz=ZoneInfo("UTC"))
    (job,), _ = collector.controller_jobs([gpu], cluster="cluster24")
    assert job.started and not job.finished
    return job


def test_cc_cache_at_start_never_duplicates_nor_rejects_a_cached_start(tmp_path):
    job = running_job()
    with CcBackendStandin(TOKEN, clusters=["cluster24"], commit_interval=HOUR) as standin:
        client = CcClient(standin.url, TOKEN, read_timeout=5)
        rig = Rig(standin, client)
        box = Outbox(tmp_path / "o.sqlite")
        box.enqueue(events_for(job))
        assert rig.drain(box).delivered == 1  # the start, cached by cc-backend
        # the daemon restarts: cc-cache runs first, cc-backend does not list the run yet
        assert client.running_jobs("cluster24") == []
        CcCache(OneRunningJob(job), box, "cluster24", client).run_once()
        rig.drain(box)
        standin.commit_now()
        box.queue.retry_now()
        rig.drain(box)
        # the job ends; its stop is delivered
        ended = replace(job, state="COMPLETED", end_time=job.start_time + 30)
        box.enqueue(events_for(ended))
        stats = rig.drain(box)
        assert stats.rejected == 0 and admin.stats(box.store)["rejected"] == 0
        assert admin.stats(box.store)["pending"] == 0
        standin.commit_now()
        (stored,) = standin.jobs()
        assert (stored["jobId"], stored["startTime"], stored["jobState"]) == (
            job.job_id, job.start_time, "completed")
        assert standin.count("/api/jobs/start_job/", 201) == 1
        box.close()
        client.close()
