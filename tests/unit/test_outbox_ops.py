"""The outbox's operator methods: list, requeue, drop, resend, state by prefix."""

import pytest

from ccadapter.outbox import DELIVERED, PENDING, REJECTED, NewEvent, Outbox, Result
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
    box.record(Result(i, REJECTED, why) for i in ids)


def test_list_filters_by_status_and_kind_and_limits(box):
    box.enqueue([start(1), stop(1), start(2), start(3)])
    deliver_all(box)  # starts 1-3 delivered; stop 1 was held back behind start 1
    reject(box, [e.id for e in box.due()])  # stop 1
    assert [r["kind"] for r in box.list_events()] == ["start", "stop", "start", "start"]
    rejected = box.list_events(REJECTED)
    assert [(r["jobId"], r["kind"], r["error"]) for r in rejected] == [(1, "stop",
                                                                        "HTTP 400: bad")]
    assert [r["jobId"] for r in box.list_events(DELIVERED, "start", limit=2)] == [1, 2]
    assert box.list_events(PENDING) == []
    assert set(box.list_events()[0]) == {"id", "cluster", "jobId", "startTime", "kind",
                                         "status", "attempts", "nextAttemptAt", "createdAt",
                                         "deliveredAt", "error"}


def test_events_by_id_leaves_out_unknown_ids(box):
    box.enqueue([start(1), start(2)])
    ids = [r["id"] for r in box.list_events()]
    assert [r["jobId"] for r in box.events_by_id([ids[1], 999])] == [2]


def test_requeue_makes_rejected_and_waiting_events_due_but_not_delivered_ones(box, clock):
    box.enqueue([start(1), start(2), start(3)])
    one, two, three = (e.id for e in box.due())
    reject(box, [one])
    box.record([Result(two, PENDING, "HTTP 503")])  # waits for its backoff
    box.record([Result(three, DELIVERED)])
    assert box.due() == []
    assert box.requeue([one, two, three, 42]) == [one, two]
    assert sorted(e.id for e in box.due()) == [one, two]


def test_requeue_all_rejected(box):
    box.enqueue([start(1), start(2), start(3)])
    ids = [e.id for e in box.due()]
    reject(box, ids[:2])
    assert box.requeue() == ids[:2]
    assert box.list_events(REJECTED) == []
    assert [e.id for e in box.due()] == ids


def test_drop_never_sends_and_keeps_the_event_from_coming_back(box):
    box.enqueue([start(1), start(2)])
    first, second = (e.id for e in box.due())
    box.record([Result(second, DELIVERED)])
    assert box.drop([first, second]) == [first]  # a delivered one is not "dropped"
    assert box.due() == []
    assert box.enqueue([start(1)]) == 0  # the next overlapping window: still known
    (row,) = box.events_by_id([first])
    assert (row["status"], row["error"]) == (DELIVERED, "dropped by operator")
    assert box.reopen_start("c", 1, 100) is False  # its body is gone: cc-cache cannot resend


def test_resend_reopens_delivered_events_with_fresh_bodies(box):
    box.enqueue([start(1), stop(1), start(2)])
    deliver_all(box)
    deliver_all(box)
    fresh = NewEvent("c", 1, 100, "start", {"jobId": 1, "startTime": 100, "fresh": True})
    unknown = NewEvent("c", 9, 100, "start", {"jobId": 9})
    assert box.resend([fresh, stop(1), unknown]) == 2
    due = box.due()
    assert [(e.job_id, e.kind) for e in due] == [(1, "start")]  # stop still after its start
    assert due[0].payload["fresh"] is True
    box.record([Result(due[0].id, DELIVERED)])
    assert [(e.job_id, e.kind) for e in box.due()] == [(1, "stop")]
    assert box.resend([start(2, host="n2")]) == 1 and box.resend([start(2)]) == 0


def test_state_items_by_prefix(box):
    box.set_state("cycle.a", "1")
    box.set_state("cycle.b", "2")
    box.set_state("cyclez", "3")
    box.set_state("slurm-window.origin", "4")
    assert box.state_items("cycle.") == {"cycle.a": "1", "cycle.b": "2"}
