"""A switch from cc-slurm-adapter (issue 38, item 4): the runs it delivered before it was
stopped are in cc-backend already. ccadapter's first window finds those that ended within
slurmWindowOverlap of lastRun, and every run still running; their events are taken as
delivered when cc-backend holds them, not sent again for a 422 each. Through the real
client to the stand-in."""

from __future__ import annotations

import pytest

from ccadapter.cc.client import CcBackendError, CcClient
from ccadapter.cc.rest_delivery import ADOPTED, RestDelivery, adopt_before
from ccadapter.daemon.deliverer import Deliverer
from ccadapter.model import EventKind
from ccadapter.outbox import DeliveryStatus, NewEvent, Outbox, admin
from ccadapter.outbox.store import Store
from ccadapter.retry import RetryPolicy
from tests.standin.ccbackend import CcBackendStandin

TOKEN = "secret-jwt-value"
T = 1_700_000_000
SWITCH = T + 1000.0


def start_body(job: int, t: int = T) -> dict:
    return {"jobId": job, "cluster": "c", "user": "u", "project": "p", "startTime": t,
            "numNodes": 1, "numHwthreads": 1, "resources": [{"hostname": "n1"}],
            "shared": "none"}


def stop_body(job: int, t: int = T, state: str = "completed") -> dict:
    return {"jobId": job, "cluster": "c", "startTime": t, "stopTime": t + 60,
            "jobState": state}


def events(job: int, t: int = T) -> list[NewEvent]:
    return [NewEvent("c", job, t, EventKind.START, start_body(job, t)),
            NewEvent("c", job, t, EventKind.STOP,
                     {"stop": stop_body(job, t), "start": start_body(job, t)})]


@pytest.fixture
def rig(tmp_path):
    with CcBackendStandin(TOKEN, clusters=["c"]) as standin:
        client = CcClient(standin.url, TOKEN, retry=RetryPolicy(attempts=1), read_timeout=2)
        box = Outbox(tmp_path / "o.sqlite")
        yield standin, client, box
        client.close()
        box.close()


def deliver(sender, box: Outbox, adopt: float) -> None:
    deliverer = Deliverer(box.queue, RestDelivery(sender, adopt_before=adopt), workers=2)
    try:
        deliverer.run_once()
    finally:
        deliverer.close()


class Unaskable:
    """The client, but cc-backend's job list cannot be read."""

    def __init__(self, client: CcClient) -> None:
        self.send = client.send

    def listed_runs(self, cluster, start_time):
        raise CcBackendError("cc-backend http://127.0.0.1 (ccRestUrl): GET /api/jobs/: 500")


def test_runs_cc_backend_holds_from_before_the_switch_are_not_sent_again(rig):
    standin, client, box = rig
    client.send(EventKind.START, start_body(1))  # cc-slurm-adapter: started and stopped
    client.send(EventKind.STOP, stop_body(1))
    client.send(EventKind.START, start_body(2))  # started, still running at the switch
    before = len(standin.requests())
    box.enqueue([*events(1), *events(2), *events(3),  # 3: ran and ended while none ran
                 *events(4, int(SWITCH) + 5)])  # 4: started after the switch
    deliver(client, box, SWITCH)
    sent = sorted((r.path, (r.body or {}).get("jobId"))
                  for r in standin.requests()[before:] if r.method == "POST")
    assert sent == [("/api/jobs/start_job/", 3), ("/api/jobs/start_job/", 4),
                    ("/api/jobs/stop_job/", 2), ("/api/jobs/stop_job/", 3),
                    ("/api/jobs/stop_job/", 4)]
    assert all(r.status in (200, 201) for r in standin.requests()[before:])  # no 422
    # the hour of their start times asked once, not once per event
    assert [r.path for r in standin.requests()[before:] if r.method == "GET"] == ["/api/jobs/"]
    listed = admin.list_events(box.store)
    notes = {(e["jobId"], e["kind"]): e["error"] or "" for e in listed}
    assert notes[(1, "start")].startswith(ADOPTED) and notes[(1, "stop")].startswith(ADOPTED)
    assert notes[(2, "start")].startswith(ADOPTED) and not notes[(2, "stop")]
    assert not notes[(4, "start")]
    assert {e["status"] for e in listed} == {DeliveryStatus.DELIVERED}


def test_without_a_switch_nothing_is_asked(rig):
    standin, client, box = rig
    box.enqueue(events(1))
    deliver(client, box, 0.0)
    assert [r.method for r in standin.requests()] == ["POST", "POST"]


def test_a_run_cc_backend_cannot_be_asked_about_is_sent(rig):
    standin, client, box = rig
    box.enqueue(events(1))
    deliver(Unaskable(client), box, SWITCH)
    assert [r.path.split("?")[0] for r in standin.requests() if r.method == "POST"] == [
        "/api/jobs/start_job/", "/api/jobs/stop_job/"]


def test_the_switch_moment_is_decided_once_where_a_lastrun_was_there(tmp_path):
    fresh = Store(tmp_path / "a.sqlite")
    assert adopt_before(fresh, True, 100.0) == 100.0
    assert adopt_before(fresh, True, 200.0) == 100.0  # kept: the next start is no switch
    new = Store(tmp_path / "b.sqlite")
    assert adopt_before(new, False, 100.0) == 0.0  # a new site: nothing was sent before
    used = Store(tmp_path / "c.sqlite")
    used.set_state("c1/slurm-window.origin", "50.0")  # an outbox that ran windows already
    assert adopt_before(used, True, 100.0) == 0.0
    for store in (fresh, new, used):
        store.close()
