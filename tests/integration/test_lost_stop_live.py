"""A stop the real cc-backend 1.5.4 took and never applied (issue 35, item 1).

cc-backend 1.5.4 answers 200 to a stop that meets a commit of its job cache and applies it to
another job (tests/ccbackend.py tells how): the run stays running there. The fault proxy
plays that race, for one job's stop: it answers 200 in cc-backend's place and forwards
nothing, so cc-backend holds the run running as after the race. Slurm is the recorded 24.11
workload (every job ended), replayed in process; the daemon's parts run on a clock the test
moves, so that hours pass in a second.

Then: (a) six hours on (ccPollInterval), after the hourly compactions, cc-cache sends that
stop again (on 1f109bc compaction had emptied the stop's body an hour after its delivery, and
the run stayed running for ever); (b) for another job, lost-stops sends its lost stop minutes
after it went out, without waiting for cc-cache.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ccadapter.cc.client import CcClient
from ccadapter.cc.rest_delivery import RestDelivery
from ccadapter.daemon.deliverer import Deliverer
from ccadapter.model import EventKind
from ccadapter.outbox import NewEvent, Outbox
from ccadapter.reconcilers.cc_cache import CcCache
from ccadapter.reconcilers.slurm_window import SlurmWindow, WindowSettings
from ccadapter.runtime.lastrun import LastRun
from ccadapter.slurm.collector import Collector
from tests.ccbackend import STOP, CcBackend, Nodes
from tests.conftest import collector_settings, fixture_json, fixture_text
from tests.fakeslurm import RecordedSlurm, recorded_clock

pytestmark = pytest.mark.integration

CLUSTER = "cluster24"
RECORDING = "24.11"
COMMIT = 10.0  # ccCommitJobInterval of the daemon; cc-backend commits every 2 s here


class Clock:
    """Set by hand, from the recording's end (its windows within slurmQueryMaxSpan)."""

    def __init__(self) -> None:
        self.now = recorded_clock(RECORDING)()

    def __call__(self) -> float:
        return self.now


def held_running(cc: CcBackend, job: int) -> bool:
    return any(j["jobId"] == job for j in cc.jobs(CLUSTER, state="running"))


def test_a_stop_cc_backend_lost_is_sent_again_then_and_hours_later(tmp_path: Path):
    meta = fixture_json(RECORDING, "testbed/workload.json")
    first = meta["ids"]["complete"][0]
    clock = Clock()
    slurm = RecordedSlurm(RECORDING, fixture_json(RECORDING, "testbed/sacct-window.json"),
                          fixture_text(RECORDING, "testbed/scontrol-d-final.txt"))
    collector = Collector(slurm, collector_settings(slurmFetchJobScripts=False), clock=clock)
    with CcBackend(tmp_path / "cc", {CLUSTER: Nodes(("m1", "m2"), ("m1",))},
                   commit_interval="2s") as cc:
        box = Outbox(tmp_path / "state" / "outbox.sqlite", clock=clock)
        client = CcClient(cc.url, cc.token)
        deliverer = Deliverer(box.queue, RestDelivery(client), workers=4)
        last = LastRun(tmp_path / "lastrun")
        last.set(meta["since"] - 60)
        try:
            SlurmWindow(collector, box, last, WindowSettings(CLUSTER), clock).run_once()
            # cc-backend's race, played for one job's stop: 200, never applied
            cc.fail_path(STOP, 200, {"msg": "taken"}, when=lambda b: b["jobId"] == first)
            deliverer.run_once()
            cc.fail_path(STOP, None)
            time.sleep(5)  # cc-backend's commit: the run is listed running now
            assert held_running(cc, first)

            # (a) six hours on, compacted every hour, then cc-cache
            for _ in range(6):
                clock.now += 3600
                box.compact(7 * 86400)
            summary = CcCache(collector, box, CLUSTER, client, COMMIT, clock).run_once()
            deliverer.run_once()
            time.sleep(3)
            assert summary["stops_again"] == 1, summary
            assert not held_running(cc, first)
            assert {j["jobId"]: j for j in cc.jobs(CLUSTER)}[first]["jobState"] == "completed"

            # (b) lost-stops, minutes after the stop, for a job of its own
            from ccadapter.reconcilers.lost_stops import LostStops

            job, start = 424242, int(clock.now) - 600
            box.enqueue(run_events(job, start))
            cc.fail_path(STOP, 200, {"msg": "taken"}, when=lambda b: b["jobId"] == job)
            deliverer.run_once()
            cc.fail_path(STOP, None)
            time.sleep(5)
            assert held_running(cc, job)
            checker = LostStops(box, CLUSTER, client, COMMIT, clock)
            clock.now += COMMIT + 90  # a few minutes on
            assert checker.run_once()["stops_again"] == 1
            deliverer.run_once()
            time.sleep(3)
            assert not held_running(cc, job)
            assert {j["jobId"]: j for j in cc.jobs(CLUSTER)}[job]["jobState"] == "failed"
            assert checker.run_once()["checked"] == 0  # each stop looked at once
        finally:
            deliverer.close()
            client.close()
            box.close()


def run_events(job: int, start: int) -> list[NewEvent]:
    body = {"jobId": job, "cluster": CLUSTER, "user": "u", "project": "p",
            "startTime": start, "numNodes": 1, "numHwthreads": 1, "shared": "none",
            "resources": [{"hostname": "m2"}], "metaData": {"jobName": "lost"}}
    stop = {"jobId": job, "cluster": CLUSTER, "startTime": start, "stopTime": start + 60,
            "jobState": "failed"}
    return [NewEvent(CLUSTER, job, start, EventKind.START, body),
            NewEvent(CLUSTER, job, start, EventKind.STOP, {"stop": stop, "start": body})]
