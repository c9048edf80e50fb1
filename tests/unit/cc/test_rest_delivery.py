"""Delivery through the real client to the strict cc-backend stand-in on 127.0.0.1."""

import json
import logging
import socket

import pytest

from ccadapter.cc.client import CcBackendError, CcClient, Outcome, classify
from ccadapter.cc.rest_delivery import ENERGY_PATIENCE, RestDelivery
from ccadapter.daemon.deliverer import Deliverer
from ccadapter.outbox import DeliveryStatus, NewEvent, Outbox, admin
from ccadapter.retry import RetryPolicy
from tests.standin.ccbackend import JOB_META_REQUEST, CcBackendStandin, decode_body

TOKEN = "secret-jwt-value"


@pytest.mark.parametrize(("kind", "status", "outcome"), [
    ("start", 201, Outcome.DELIVERED), ("start", 422, Outcome.DELIVERED),
    ("stop", 200, Outcome.DELIVERED), ("stop", 422, Outcome.DELIVERED),
    ("stop", 404, Outcome.NEEDS_START), ("start", 404, Outcome.REJECTED),
    ("start", 400, Outcome.REJECTED), ("start", 401, Outcome.AUTH),
    ("stop", 403, Outcome.AUTH), ("start", 503, Outcome.RETRY), ("start", 0, Outcome.RETRY),
    ("nodestate", 200, Outcome.DELIVERED), ("nodestate", 404, Outcome.REJECTED),
    ("energy", 200, Outcome.DELIVERED), ("energy", 422, Outcome.RETRY),
    ("energy", 500, Outcome.RETRY), ("energy", 400, Outcome.REJECTED),
    ("energy", 404, Outcome.REJECTED), ("energy", 401, Outcome.AUTH),
])
def test_classify(kind, status, outcome):
    assert classify(kind, status) is outcome


@pytest.fixture
def standin():
    with CcBackendStandin(TOKEN, clusters=["c"]) as s:
        yield s


@pytest.fixture
def setup(tmp_path, standin):
    box = Outbox(tmp_path / "o.sqlite")
    client = CcClient(standin.url, TOKEN, retry=RetryPolicy(attempts=1), read_timeout=2)
    deliverer = Deliverer(box.queue, RestDelivery(client), workers=2)
    yield box, deliverer, standin
    deliverer.close()
    client.close()
    box.close()


def start_body(job=1, t=1_700_000_000, **extra):
    """With metaData, as ccadapter always sends it (cc/payload.py): cc-backend's edit_meta
    of an archived job started without any fails (pkg/archive/archive.go UpdateMetadata)."""
    return {"jobId": job, "cluster": "c", "user": "u", "project": "p", "startTime": t,
            "numNodes": 1, "numHwthreads": 1, "resources": [{"hostname": "n1"}],
            "metaData": {"jobName": "j", "submitTime": str(t - 1)}, **extra}


def stop_body(job=1, t=1_700_000_000):
    return {"jobId": job, "cluster": "c", "startTime": t, "stopTime": t + 60,
            "jobState": "completed"}


def events(job=1, t=1_700_000_000):
    return [NewEvent("c", job, t, "start", start_body(job, t)),
            NewEvent("c", job, t, "stop", {"stop": stop_body(job, t),
                                           "start": start_body(job, t)})]


def paths(standin):
    return [(r.path, r.status) for r in standin.requests()]


def test_start_then_stop(setup):
    box, d, standin = setup
    box.enqueue(events())
    assert d.run_once().delivered == 2
    assert paths(standin) == [("/api/jobs/start_job/", 201), ("/api/jobs/stop_job/", 200)]


def test_stop_404_delivers_start_first(setup):
    box, d, standin = setup
    box.enqueue(events()[1:])  # only the stop is queued (the start was compacted long ago)
    assert d.run_once().delivered == 1
    assert paths(standin) == [("/api/jobs/stop_job/", 404), ("/api/jobs/start_job/", 201),
                              ("/api/jobs/stop_job/", 200)]


def test_repeated_events_count_as_delivered(setup):
    box, d, standin = setup
    box.enqueue(events())
    d.run_once()
    box2 = Outbox(box.path.with_name("other.sqlite"))  # e.g. a state directory lost
    d2 = Deliverer(box2.queue, d.deliver, workers=1)
    box2.enqueue(events())
    assert d2.run_once().delivered == 2
    assert [s for p, s in paths(standin) if p.endswith("_job/")][-2:] == [422, 422]
    # the start's 422 checked: the job it names is this very run, held already
    assert ("/api/jobs/1", 200) in paths(standin)
    d2.close()
    box2.close()


def test_bad_request_is_parked_with_body(setup):
    box, d, _ = setup
    box.enqueue([NewEvent("c", 1, 5, "start", start_body(1, 5, unknownField=1))])
    assert d.run_once().rejected == 1
    assert "unknownField" in admin.rejected(box.store)[0]["error"]
    assert "HTTP 400" in admin.rejected(box.store)[0]["error"]


def test_outage_retries_later_and_secret_not_logged(setup, caplog):
    box, d, standin = setup
    standin.fail_with(503)
    box.enqueue(events()[:1])
    stats = d.run_once()
    assert stats.retried == 1 and stats.delivered == 0
    assert box.queue.due() == []  # backoff
    standin.fail_with(None)
    box.queue.retry_now()
    assert d.run_once().delivered == 1
    assert TOKEN not in caplog.text


def test_dropped_connections_and_hangs_are_retried(setup):
    box, d, standin = setup
    box.enqueue(events()[:1])
    standin.drop_connections(True)
    assert d.run_once().retried == 1
    standin.drop_connections(False)
    standin.hang(5)
    box.queue.retry_now()
    assert d.run_once().retried == 1  # the 2 s read timeout ends the wait
    standin.hang(None)
    box.queue.retry_now()
    assert d.run_once().delivered == 1


def test_auth_error_said_plainly(tmp_path, standin, caplog):
    box = Outbox(tmp_path / "o.sqlite")
    client = CcClient(standin.url, "wrong-token", retry=RetryPolicy(attempts=1))
    d = Deliverer(box.queue, RestDelivery(client), workers=1)
    box.enqueue(events()[:1])
    d.run_once()
    assert "check ccRestJwt" in caplog.text and admin.stats(box.store)["rejected"] == 0
    d.close()
    client.close()
    box.close()


def test_running_jobs_pages_and_errors(standin):
    client = CcClient(standin.url, TOKEN)
    sender_box = [client.send("start", start_body(j, 1_700_000_000 + j)) for j in range(5)]
    assert all(a.outcome is Outcome.DELIVERED for a in sender_box)
    jobs = client.running_jobs("c", per_page=2)
    assert sorted(j["jobId"] for j in jobs) == [0, 1, 2, 3, 4]
    standin.fail_with(500)
    with pytest.raises(CcBackendError, match="HTTP 500"):
        client.running_jobs("c", per_page=2)
    client.close()


def test_ipv6_loopback(tmp_path):
    try:
        standin = CcBackendStandin(TOKEN, clusters=["c"], host="::1").start()
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    client = CcClient(standin.url, TOKEN)
    assert client.send("start", start_body()).status == 201
    client.close()
    standin.stop()


def test_backlog_is_due_at_once_when_the_target_is_back(setup):
    box, d, standin = setup
    standin.fail_with(503)
    box.enqueue([ev for j in range(1, 4) for ev in events(j, 1_700_000_000 + j)])
    assert d.run_once().delivered == 0
    assert box.queue.due() == []  # the three starts wait with backoff (seconds to minutes)
    standin.fail_with(None)
    box.enqueue(events(9, 1_700_000_009))  # a new job: its start gets through
    stats = d.run_once()
    # that success made the backlog due: everything went in the same burst
    assert stats.delivered == 8 and admin.stats(box.store)["pending"] == 0


def test_an_outage_is_said_once_not_once_per_event(tmp_path, caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    box = Outbox(tmp_path / "o.sqlite")
    client = CcClient(f"http://127.0.0.1:{port}", TOKEN, retry=RetryPolicy(attempts=1))
    d = Deliverer(box.queue, RestDelivery(client), workers=4)
    box.enqueue([NewEvent("c", j, 100 + j, "start", start_body(j, 100 + j)) for j in range(20)])
    with caplog.at_level(logging.WARNING):
        assert d.run_once().retried == 20
    said = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    assert len(said) == 1 and "connection refused" in said[0]
    assert {e["error"] for e in admin.list_events(box.store, "pending")} == {
        "HTTP 0: connection refused"}
    d.close()
    client.close()
    box.close()


def energy_event(job=1, t=1_700_000_000, joules=51234):
    return NewEvent("c", job, t, "energy", {
        "jobId": job, "cluster": "c", "startTime": t,
        "payload": {"key": "energy", "value": str(joules)}})


def test_energy_goes_into_the_stopped_jobs_metadata(setup):
    box, d, standin = setup
    box.enqueue([*events(), energy_event()])
    assert d.run_once().delivered == 3
    assert [(r.method, r.path, r.status) for r in standin.requests()] == [
        ("POST", "/api/jobs/start_job/", 201), ("POST", "/api/jobs/stop_job/", 200),
        ("PATCH", "/api/jobs/edit_meta/", 200)]
    decode_body(standin.requests()[-1].body, None, JOB_META_REQUEST)
    (job,) = standin.jobs("c")
    assert job["jobState"] == "completed" and job["metaData"]["energy"] == "51234"


def test_energy_is_retried_while_cc_backend_archives_the_job(setup, caplog):
    """cc-backend stores the value, then answers 500 until the archiver wrote the job's
    meta.json; the outbox's backoff retries until it has."""
    box, d, standin = setup
    standin.archive_after(3600)
    box.enqueue([*events(), energy_event()])
    with caplog.at_level(logging.DEBUG):  # a line per retry at debug only (issue 29)
        stats = d.run_once()
    assert (stats.delivered, stats.retried) == (2, 1)
    (waiting,) = admin.list_events(box.store, "pending")
    assert waiting["kind"] == "energy" and waiting["error"].startswith("HTTP 500: open ")
    assert "not taken yet, will retry" in caplog.text and "WARNING" not in caplog.text
    standin.finish_archiving()
    box.queue.retry_now()
    assert d.run_once().delivered == 1
    assert standin.jobs("c")[0]["metaData"]["energy"] == "51234"


def test_energy_cc_backend_never_takes_is_rejected_an_hour_after_its_stop(setup, clock_box):
    """A run cc-backend does not have (422, e.g. a NATS stop it dropped) is given up
    ENERGY_PATIENCE after its stop was delivered, with cc-backend's answer; an outage before
    that (the stop waits, and the edit behind it) is retried without end and costs none of
    the edit's patience."""
    from ccadapter.outbox import Result

    box, clock = clock_box
    client = CcClient(setup[2].url, TOKEN, retry=RetryPolicy(attempts=1), read_timeout=2)
    d = Deliverer(box.queue, RestDelivery(client, clock=clock), workers=1)
    t = 1_700_000_000
    box.enqueue([NewEvent("c", 99, t, "stop", {"stop": stop_body(99, t)}),
                 energy_event(job=99)])
    setup[2].fail_with(503)
    for _ in range(24):  # two hours down
        clock.now += 300
        d.run_once()
    assert admin.stats(box.store)["rejected"] == 0
    (stop,) = [e for e in admin.list_events(box.store, "pending") if e["kind"] == "stop"]
    box.queue.record([Result(stop["id"], DeliveryStatus.DELIVERED)])  # taken, then lost
    stopped = clock.now
    setup[2].fail_with(None)
    while not admin.rejected(box.store):
        clock.now += 300  # past any backoff
        d.run_once()
        assert clock.now - stopped <= ENERGY_PATIENCE + 300
    assert clock.now - stopped >= ENERGY_PATIENCE
    (parked,) = admin.rejected(box.store)
    assert parked["error"].startswith("gave up 60 min after the stop, ")
    assert "HTTP 422: " in parked["error"] and "finding job failed" in parked["error"]
    d.close()
    client.close()


@pytest.fixture
def clock_box(tmp_path):
    class Clock:
        now = 1_000_000.0

        def __call__(self):
            return self.now

    clock = Clock()
    box = Outbox(tmp_path / "clocked.sqlite", clock=clock)
    yield box, clock
    box.close()


def test_an_event_whose_delivery_raises_does_not_stall_the_others(tmp_path, caplog):
    """Issue 29: the pool's map gave up the whole batch on the first exception, so one event
    whose delivery raised (a bug) was due again in every batch and held every other one."""
    from ccadapter.outbox import Result

    box = Outbox(tmp_path / "o.sqlite")
    box.enqueue([NewEvent("c", job, 1, "start", {"jobId": job}) for job in (1, 2, 3)])

    def deliver(event):
        if event.job_id == 2:
            raise KeyError("resources")
        return Result(event.id, DeliveryStatus.DELIVERED)

    deliverer = Deliverer(box.queue, deliver, workers=2)
    try:
        stats = deliverer.run_once()
    finally:
        deliverer.close()
    assert (stats.delivered, stats.retried) == (2, 1)
    counts = admin.stats(box.store)["counts"]
    assert counts == {"start:delivered": 2, "start:pending": 1}
    (waiting,) = admin.list_events(box.store, "pending", None, 10)
    assert waiting["jobId"] == 2 and "KeyError" in waiting["error"]
    assert "delivering start of job 2 (c) failed" in caplog.text
    box.close()


def test_a_run_held_with_anothers_stop_is_deleted_there_and_sent_again(setup, caplog):
    """cc-backend 1.5.4 can apply a stop to the wrong job (its job cache committed while the
    stop waited). Our own stop of that job, sent again, gets "already stopped": where the
    state it names is not ours, or cc-backend holds another duration, the run is deleted
    there and sent again, start and stop; a run held as our stop said is left alone. Fails
    on 77639ec: both wrong runs were only said, and stayed wrong."""
    box, deliverer, standin = setup
    t = {1: 1_700_000_000, 2: 1_700_000_100, 3: 1_700_000_200}
    box.enqueue([e for job, start in t.items() for e in events(job, start)])
    assert deliverer.run_once().delivered == 6
    standin.misapply_stop(2, t[2], "cancelled", 854)  # another state and duration
    standin.misapply_stop(3, t[3], "completed", 854)  # our state, another duration
    for job, start in t.items():  # as lost-stops does (test_reconcilers)
        assert box.reopen_start("c", job, start, kind="stop")
    with caplog.at_level(logging.WARNING):
        assert deliverer.run_once().delivered == 3
    held = {j["jobId"]: (j["jobState"], j["duration"]) for j in standin.jobs("c")}
    assert held == {1: ("completed", 60), 2: ("completed", 60), 3: ("completed", 60)}
    deleted = [r.body["jobId"] for r in standin.requests("/api/jobs/delete_job/")
               if r.status == 200]
    assert sorted(deleted) == [2, 3]
    said = [r.getMessage() for r in caplog.records if "deleted there" in r.getMessage()]
    assert len(said) == 2 and any("stopped as cancelled, Slurm ended it completed" in m
                                  for m in said)
    assert any("stopped after 854 s, Slurm ended it after 60 s" in m for m in said)


def test_a_run_cc_backend_cannot_list_is_replaced_and_one_without_start_is_said(caplog):
    """A run holding another's stop has no archive where its row says: cc-backend answers
    500 to a list holding it, which says it too. Without the start body kept, the run cannot
    be sent again: it is said as an error and left as it is (never deleted)."""
    from ccadapter.cc.client import Answer
    from ccadapter.outbox.queue import Event

    calls = []

    class Broken:
        def send(self, kind, body):
            calls.append((str(kind), body["jobId"]))
            if str(kind) == "stop" and ("delete", body["jobId"]) not in calls:
                return Answer(Outcome.DELIVERED, 422, f'"jobId {body["jobId"]} (id 7) on c : '
                              'job has already been stopped (state is: completed)"')
            return Answer(Outcome.DELIVERED if str(kind) == "start" or
                          ("start", body["jobId"]) in calls else Outcome.NEEDS_START,
                          201 if str(kind) == "start" else 200, "")

        def listed_runs(self, cluster, start_time):
            raise CcBackendError("GET /api/jobs/ page 1: HTTP 500 open meta.json", 500)

        def delete_run(self, cluster, job_id, start):
            calls.append(("delete", job_id))
            return Answer(Outcome.DELIVERED, 200, "")

    def event(job, with_start):
        payload = {"stop": stop_body(job), **({"start": start_body(job)} if with_start else {})}
        return Event(id=job, cluster="c", job_id=job, start_time=1_700_000_000, kind="stop",
                     payload=payload, attempts=0, created_at=0.0)

    delivery = RestDelivery(Broken())
    with caplog.at_level(logging.WARNING):
        replaced = delivery(event(1, True))
        kept = delivery(event(2, False))
    assert replaced.status is DeliveryStatus.DELIVERED and not replaced.error
    assert calls[:4] == [("stop", 1), ("delete", 1), ("start", 1), ("stop", 1)]
    assert ("delete", 2) not in calls
    assert kept.status is DeliveryStatus.DELIVERED
    assert kept.error.endswith("correct it in cc-backend")
    assert "listed by none of its job lists" in kept.error


def test_while_the_target_is_down_a_burst_sends_one_probe_not_every_new_event(tmp_path):
    """A catch-up enqueues thousands of events while cc-backend is down: each burst tries
    one of them, not each once (refused connections cost the CPU the reconcilers need);
    once the probe gets through, the burst goes on with everything at once."""
    from ccadapter.outbox import Result

    box = Outbox(tmp_path / "o.sqlite")
    up = False
    sent: list[int] = []

    def deliver(event):
        sent.append(event.job_id)
        if up:
            return Result(event.id, DeliveryStatus.DELIVERED)
        return Result(event.id, DeliveryStatus.PENDING, "refused")

    deliverer = Deliverer(box.queue, deliver, workers=2, batch=8)
    try:
        box.enqueue([NewEvent("c", 1, 1, "start", {"jobId": 1})])
        assert deliverer.run_once().retried == 1  # a batch: nothing got through
        box.enqueue([NewEvent("c", job, 1, "start", {"jobId": job}) for job in range(2, 40)])
        for _ in range(3):
            assert deliverer.run_once().retried == 1  # one probe per burst
        assert len(sent) == 4
        up = True
        stats = deliverer.run_once()
        assert stats.delivered == 39 and admin.stats(box.store)["pending"] == 0
        assert len(sent) == 4 + 39
    finally:
        deliverer.close()
        box.close()


def test_the_next_batch_is_answered_while_one_is_recorded_and_order_is_kept(tmp_path):
    """Two batches in flight: the workers go on with the next one while the last is
    recorded (a synced transaction), yet no event is sent twice and no stop goes out
    before its start was answered."""
    import threading
    import time

    from ccadapter.outbox import Result

    box = Outbox(tmp_path / "o.sqlite")
    box.enqueue([ev for job in range(1, 13) for ev in events(job, 1_700_000_000 + job)])
    log_lock = threading.Lock()
    happened: list[tuple[str, object]] = []
    answered: set[tuple[int, str]] = set()

    def deliver(event):
        with log_lock:
            happened.append(("send", event.id))
            if event.kind == "stop":
                assert (event.job_id, "start") in answered, event
        time.sleep(0.05)
        with log_lock:
            answered.add((event.job_id, event.kind))
        return Result(event.id, DeliveryStatus.DELIVERED)

    record = box.queue.record

    def slow_record(results):
        results = list(results)
        time.sleep(0.05)
        record(results)
        with log_lock:
            happened.append(("recorded", len(results)))

    box.queue.record = slow_record
    deliverer = Deliverer(box.queue, deliver, workers=4, batch=4)
    try:
        stats = deliverer.run_once()
    finally:
        deliverer.close()
        box.close()
    sent = [what for kind, what in happened if kind == "send"]
    assert stats.delivered == 24 and len(sent) == len(set(sent)) == 24
    first_record = happened.index(next(h for h in happened if h[0] == "recorded"))
    assert len([h for h in happened[:first_record] if h[0] == "send"]) > 4  # overlapped


def test_a_full_disk_backs_off_and_never_sends_an_event_twice(tmp_path, caplog):
    """Issue 35, item 5: while the outbox could not record the answers (a full disk), the
    batch in flight was abandoned and its events sent again a second later, each several
    times: 512 requests a second against cc-backend. The answers now wait in memory until
    they can be recorded, no event goes out again meanwhile, and delivery backs off."""
    import threading
    import time

    from ccadapter.daemon.loop import Daemon
    from ccadapter.errors import OutboxError
    from ccadapter.outbox import Result

    box = Outbox(tmp_path / "o.sqlite")
    box.enqueue([NewEvent("c", job, 1, "start", {"jobId": job}) for job in range(1, 41)])
    sent: list[int] = []
    full = threading.Event()
    full.set()
    record = box.queue.record
    tries = []

    def deliver(event):
        sent.append(event.id)
        return Result(event.id, DeliveryStatus.DELIVERED)

    def record_unless_full(results):
        tries.append(time.monotonic())
        if full.is_set():
            raise OutboxError(str(box.path), "database or disk is full")
        record(results)

    box.queue.record = record_unless_full
    deliverer = Deliverer(box.queue, deliver, workers=4, batch=16)
    daemon = Daemon(deliverer, idle_delivery_wait=0.2)
    runner = threading.Thread(target=daemon.run)
    try:
        with caplog.at_level(logging.WARNING):
            runner.start()
            time.sleep(4)
            # what was sent before the first record failed, each once, and nothing since
            assert len(sent) == len(set(sent)) <= 40
            stuck = len(tries)
            full.clear()  # space again
            deadline = time.monotonic() + 90
            while admin.stats(box.store)["pending"] and time.monotonic() < deadline:
                time.sleep(0.1)
    finally:
        daemon.stop()
        runner.join(10)
        deliverer.close()
    assert admin.stats(box.store)["pending"] == 0
    assert len(sent) == len(set(sent)) == 40
    assert stuck <= 5, tries  # backing off: 1 s, 2 s, ... not one try a second per batch
    assert len([r for r in caplog.records if "delivery paused" in r.getMessage()]) <= 2
    box.close()


def test_starts_leave_renumbered_and_the_outbox_keeps_slurms_numbers(tmp_path, standin):
    """Issue 45: the start (also the one a stop's 404 sends first) goes in cc-backend's
    numbering; the outbox, and so the next mapping, keeps Slurm's."""
    def renumber(body):
        return {**body, "resources": [{**r, "hwthreads": [t + 100 for t in r["hwthreads"]]}
                                      for r in body["resources"]]}

    def with_threads(body):
        return {**body, "resources": [{"hostname": "n1", "hwthreads": [0, 1]}]}

    box = Outbox(tmp_path / "o.sqlite")
    client = CcClient(standin.url, TOKEN, retry=RetryPolicy(attempts=1), read_timeout=2)
    d = Deliverer(box.queue, RestDelivery(client, renumber=renumber), workers=1)
    try:
        box.enqueue([NewEvent("c", 1, 5, "start", with_threads(start_body(1, 5)))])
        box.enqueue([NewEvent("c", 2, 5, "stop", {"stop": stop_body(2, 5),
                                                  "start": with_threads(start_body(2, 5))})])
        assert d.run_once().delivered == 2
        assert [b["resources"][0]["hwthreads"] for b in standin.started()] == [[100, 101]] * 2
        with box.store.read() as db:
            kept = [json.loads(b) for (b,) in db.execute("SELECT body FROM bodies")]
        assert [k["resources"][0]["hwthreads"] for k in kept] == [[0, 1]]
    finally:
        d.close()
        client.close()
        box.close()
