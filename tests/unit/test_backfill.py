"""backfill: chunking, idempotent enqueueing, resending what cc-backend lost."""

from zoneinfo import ZoneInfo

import pytest

from ccadapter.config.keys import Config
from ccadapter.ops.backfill import Backfill, chunks
from ccadapter.outbox import DeliveryStatus, Outbox, Result, admin
from ccadapter.slurm.collector import Collector
from tests.conftest import collector_settings, fixture_json, fixture_text
from tests.fakeslurm import RecordedSlurm


def test_chunks_cover_the_range_without_gaps():
    assert chunks(0, 10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert chunks(0, 3, 4) == [(0, 3)]
    with pytest.raises(ValueError, match="empty"):
        chunks(5, 5, 1)
    with pytest.raises(ValueError, match="positive"):
        chunks(0, 5, 0)


@pytest.fixture
def backfill(tmp_path):
    since = fixture_json("24.11", "testbed/workload.json")["since"]
    runner = RecordedSlurm("24.11", fixture_json("24.11", "testbed/sacct-window.json"),
                           fixture_text("24.11", "testbed/scontrol-d-final.txt"),
                           clock=lambda: since + 3600)
    collector = Collector(runner, collector_settings(slurmFetchJobScripts=False),
                          tz=ZoneInfo("UTC"),
                          clock=lambda: since + 3600)
    box = Outbox(tmp_path / "o.sqlite")
    yield runner, collector, box
    box.close()


def test_a_chunk_is_a_listing_and_its_runs_read_and_enqueued_once(backfill):
    runner, collector, box = backfill
    since = fixture_json("24.11", "testbed/workload.json")["since"]
    job = Backfill(collector, box, None)
    first = job.run_chunk(since, since + 3600)
    assert runner.calls["sacct"] == 2  # the listing, and the JSON of its runs
    listing = runner.argvs[0]
    assert listing[listing.index("-s") + 1] == "RUNNING"  # never pending jobs
    assert first.jobs > 5 and first.new == first.events > 10 and first.resent == 0
    again = job.run_chunk(since, since + 3600)
    assert (again.events, again.new, again.resent) == (first.events, 0, 0)
    assert "--starttime" in runner.argvs[0] and "--endtime" in runner.argvs[0]


def test_resend_opens_delivered_events_only(backfill):
    _, collector, box = backfill
    since = fixture_json("24.11", "testbed/workload.json")["since"]
    first = Backfill(collector, box, None).run_chunk(since, since + 3600)
    while due := box.queue.due():
        box.queue.record(Result(e.id, DeliveryStatus.DELIVERED) for e in due)
    again = Backfill(collector, box, None, resend=True).run_chunk(since, since + 3600)
    assert (again.new, again.resent) == (0, first.events)
    assert len(admin.list_events(box.store, "pending", limit=1000)) == first.events


def test_ignored_hosts_are_not_backfilled(backfill):
    _, collector, box = backfill
    since = fixture_json("24.11", "testbed/workload.json")["since"]
    result = Backfill(collector, box, Config(ignoreHosts=".*").ignore_hosts_pattern()).run_chunk(
        since, since + 3600)
    assert result.jobs > 5 and result.events == 0


def test_a_het_job_is_backfilled_once_under_its_leaders_id(backfill):
    _, collector, box = backfill
    meta = fixture_json("24.11", "testbed/workload.json")
    leader, comp = meta["ids"]["hetjob"]
    Backfill(collector, box, None).run_chunk(meta["since"], meta["since"] + 3600)
    events = admin.list_events(box.store, limit=1000)
    assert sorted(e["kind"] for e in events if e["jobId"] == leader) == ["start", "stop"]
    assert all(e["jobId"] != comp for e in events)
