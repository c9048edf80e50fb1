"""The outbox's operator methods: list, requeue, drop, resend, state by prefix."""

import pytest

from ccadapter.outbox import DeliveryStatus, NewEvent, Outbox, Result, admin
from tests.unit.test_outbox import Clock, deliver_all, start, stop


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def box(tmp_path, clock):
    ob = Outbox(tmp_path / "outbox.sqlite", clock=clock)
    yield ob
    ob.close()


def reject(box, ids, why="HTTP 400: bad"):
    box.queue.record(Result(i, DeliveryStatus.REJECTED, why) for i in ids)


def test_list_filters_by_status_and_kind_and_limits(box):
    box.enqueue([start(1), stop(1), start(2), start(3)])
    deliver_all(box)  # starts 1-3 delivered; stop 1 was held back behind start 1
    reject(box, [e.id for e in box.queue.due()])  # stop 1
    assert [r["kind"] for r in admin.list_events(box.store)] == ["start", "stop", "start", "start"]
    rejected = admin.list_events(box.store, DeliveryStatus.REJECTED)
    assert [(r["jobId"], r["kind"], r["error"]) for r in rejected] == [(1, "stop",
                                                                        "HTTP 400: bad")]
    listed = admin.list_events(box.store, DeliveryStatus.DELIVERED, "start", limit=2)
    assert [r["jobId"] for r in listed] == [1, 2]
    assert admin.list_events(box.store, DeliveryStatus.PENDING) == []
    assert set(admin.list_events(box.store)[0]) == {"id", "cluster", "jobId", "startTime", "kind",
                                         "status", "attempts", "nextAttemptAt", "createdAt",
                                         "deliveredAt", "error"}


def test_events_by_id_leaves_out_unknown_ids(box):
    box.enqueue([start(1), start(2)])
    ids = [r["id"] for r in admin.list_events(box.store)]
    assert [r["jobId"] for r in admin.events_by_id(box.store, [ids[1], 999])] == [2]


def test_requeue_makes_rejected_and_waiting_events_due_but_not_delivered_ones(box, clock):
    box.enqueue([start(1), start(2), start(3)])
    one, two, three = (e.id for e in box.queue.due())
    reject(box, [one])
    box.queue.record([Result(two, DeliveryStatus.PENDING, "HTTP 503")])  # waits for its backoff
    box.queue.record([Result(three, DeliveryStatus.DELIVERED)])
    assert box.queue.due() == []
    assert admin.requeue(box.store, [one, two, three, 42]) == [one, two]
    assert sorted(e.id for e in box.queue.due()) == [one, two]


def test_requeue_all_rejected(box):
    box.enqueue([start(1), start(2), start(3)])
    ids = [e.id for e in box.queue.due()]
    reject(box, ids[:2])
    assert admin.requeue(box.store) == ids[:2]
    assert admin.list_events(box.store, DeliveryStatus.REJECTED) == []
    assert [e.id for e in box.queue.due()] == ids


def test_drop_never_sends_and_keeps_the_event_from_coming_back(box):
    box.enqueue([start(1), start(2)])
    first, second = (e.id for e in box.queue.due())
    box.queue.record([Result(second, DeliveryStatus.DELIVERED)])
    assert admin.drop(box.store, [first, second]) == [first]  # a delivered one is not "dropped"
    assert box.queue.due() == []
    assert box.enqueue([start(1)]) == 0  # the next overlapping window: still known
    (row,) = admin.events_by_id(box.store, [first])
    assert (row["status"], row["error"]) == (DeliveryStatus.DELIVERED, "dropped by operator")
    assert box.reopen_start("c", 1, 100) is False  # its body is gone: cc-cache cannot resend


def test_resend_reopens_delivered_events_with_fresh_bodies(box):
    box.enqueue([start(1), stop(1), start(2)])
    deliver_all(box)
    deliver_all(box)
    fresh = NewEvent("c", 1, 100, "start", {"jobId": 1, "startTime": 100, "fresh": True})
    unknown = NewEvent("c", 9, 100, "start", {"jobId": 9})
    assert admin.resend(box.store, [fresh, stop(1), unknown]) == 2
    due = box.queue.due()
    assert [(e.job_id, e.kind) for e in due] == [(1, "start")]  # stop still after its start
    assert due[0].payload["fresh"] is True
    box.queue.record([Result(due[0].id, DeliveryStatus.DELIVERED)])
    assert [(e.job_id, e.kind) for e in box.queue.due()] == [(1, "stop")]
    assert admin.resend(box.store, [start(2, host="n2")]) == 1
    assert admin.resend(box.store, [start(2)]) == 0


def test_state_items_by_prefix(box):
    box.store.set_state("cycle.a", "1")
    box.store.set_state("cycle.b", "2")
    box.store.set_state("cyclez", "3")
    box.store.set_state("slurm-window.origin", "4")
    assert box.store.state_items("cycle.") == {"cycle.a": "1", "cycle.b": "2"}
