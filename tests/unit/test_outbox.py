"""The outbox: idempotency, per-job order, first-sight allocation, backoff, compaction."""

import json
import re
import threading
from pathlib import Path

import pytest

import ccadapter.outbox as outbox_package
from ccadapter.outbox import NOT_HELD, DeliveryStatus, NewEvent, Outbox, Result, admin


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def box(tmp_path, clock):
    ob = Outbox(tmp_path / "state" / "outbox.sqlite", clock=clock)
    yield ob
    ob.close()


def start(job, t=100, rich=False, host="n1"):
    return NewEvent("c", job, t, "start", {"jobId": job, "startTime": t, "host": host}, rich)


def stop(job, t=100):
    return NewEvent("c", job, t, "stop", {"stop": {"jobId": job, "startTime": t},
                                         "start": {"jobId": job, "startTime": t}})


def deliver_all(box):
    events = box.queue.due()
    box.queue.record(Result(e.id, DeliveryStatus.DELIVERED) for e in events)
    return events


def test_enqueue_is_idempotent(box):
    assert box.enqueue([start(1), stop(1)]) == 2
    assert box.enqueue([start(1), stop(1)]) == 0
    assert admin.stats(box.store)["pending"] == 2


def test_stop_only_after_its_start(box):
    box.enqueue([start(1), stop(1)])
    assert [e.kind for e in box.queue.due()] == ["start"]
    deliver_all(box)
    assert [e.kind for e in box.queue.due()] == ["stop"]


def test_stop_follows_a_rejected_start(box):
    box.enqueue([start(1), stop(1)])
    box.queue.record([Result(box.queue.due()[0].id, DeliveryStatus.REJECTED, "HTTP 400")])
    assert [e.kind for e in box.queue.due()] == ["stop"]


def test_requeued_run_starts_after_old_run_stopped(box):
    box.enqueue([start(1, 100), stop(1, 100), start(1, 200)])
    assert [(e.kind, e.start_time) for e in box.queue.due()] == [("start", 100)]
    deliver_all(box)
    assert [(e.kind, e.start_time) for e in box.queue.due()] == [("stop", 100)]
    deliver_all(box)
    assert [(e.kind, e.start_time) for e in box.queue.due()] == [("start", 200)]


def test_first_sight_allocation_kept(box):
    box.enqueue([start(1, rich=False, host="poor")])
    box.enqueue([start(1, rich=True, host="rich")])
    box.enqueue([start(1, rich=False, host="poor again")])
    assert box.queue.due()[0].payload["host"] == "rich"
    box.enqueue([stop(1)])
    deliver_all(box)
    assert box.queue.due()[0].payload["start"]["host"] == "rich"


def test_retry_backoff_and_retry_now(box, clock):
    box.enqueue([start(1)])
    box.queue.record([Result(box.queue.due()[0].id, DeliveryStatus.PENDING, "HTTP 503")])
    assert box.queue.due() == []
    clock.now += 301
    assert len(box.queue.due()) == 1
    box.queue.record([Result(box.queue.due()[0].id, DeliveryStatus.PENDING, "HTTP 503")])
    box.queue.retry_now()
    assert len(box.queue.due()) == 1


def test_survives_reopen(tmp_path, clock):
    path = tmp_path / "o.sqlite"
    ob = Outbox(path, clock=clock)
    ob.enqueue([start(1), stop(1)])
    ob.close()
    ob = Outbox(path, clock=clock)
    assert [e.kind for e in ob.queue.due()] == ["start"]
    ob.close()


def test_open_runs_and_reopen(box):
    box.enqueue([start(1), start(2), stop(2)])
    assert box.open_runs("c") == [(1, 100)]
    deliver_all(box)
    assert box.reopen_start("c", 1, 100)
    assert [(e.job_id, e.kind) for e in box.queue.due()] == [(1, "start"), (2, "stop")]
    assert not box.reopen_start("c", 7, 100)


def test_compaction(box, clock):
    box.enqueue([start(1), stop(1)])
    deliver_all(box)
    deliver_all(box)
    clock.now += 7200
    assert box.compact(keep_seconds=86400) == 0
    assert box.enqueue([start(1), stop(1)]) == 0  # still idempotent
    clock.now += 86400
    assert box.compact(keep_seconds=86400) == 2


def test_nodestate_keeps_only_newest(box):
    for t in (1, 2, 3):
        box.enqueue([NewEvent("c", 0, t, "nodestate", {"t": t})])
    assert [e.payload["t"] for e in box.queue.due()] == [3]


def test_result_of_a_replaced_nodestate_is_ignored(box):
    box.enqueue([NewEvent("c", 0, 1, "nodestate", {"t": 1})])
    in_flight = box.queue.due()[0]
    box.enqueue([NewEvent("c", 0, 2, "nodestate", {"t": 2})])  # replaces the pending one
    box.queue.record([Result(in_flight.id, DeliveryStatus.PENDING, "HTTP 503")])
    assert [e.payload["t"] for e in box.queue.due()] == [2]


def test_rejected_listed(box):
    box.enqueue([start(1)])
    box.queue.record([Result(box.queue.due()[0].id, DeliveryStatus.REJECTED,
                             "HTTP 400: unknown field")])
    assert admin.rejected(box.store)[0]["error"] == "HTTP 400: unknown field"
    assert admin.stats(box.store)["rejected"] == 1


def test_concurrent_enqueue_and_record(box):
    def writer(base):
        for i in range(50):
            box.enqueue([start(base + i)])

    threads = [threading.Thread(target=writer, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert admin.stats(box.store)["pending"] == 200


# --- NATS notifications of delivered events ------------------------------------------------

def nodestate():
    return NewEvent("c", 0, 0, "nodestate", {"nodes": []})


def test_notifications_are_owed_only_for_delivered_starts_and_stops(tmp_path, clock):
    box = Outbox(tmp_path / "n.sqlite", clock=clock, notify=True)
    box.enqueue([start(1), stop(1), nodestate(), start(2)])
    queue = box.notifications()
    assert queue.due() == []  # nothing delivered yet, nothing to announce
    first = box.queue.due()
    box.queue.record([Result(e.id, DeliveryStatus.DELIVERED if e.job_id != 2
                             else DeliveryStatus.REJECTED) for e in first])
    assert [(e.job_id, e.kind) for e in queue.due()] == [(1, "start")]  # stop waits for it
    box.queue.record([Result(e.id, DeliveryStatus.DELIVERED) for e in box.queue.due()])
    due = queue.due()
    assert [(e.job_id, e.kind) for e in due] == [(1, "start")]
    queue.record([Result(due[0].id, DeliveryStatus.DELIVERED)])
    due = queue.due()
    assert [(e.job_id, e.kind) for e in due] == [(1, "stop")]
    assert due[0].payload["start"]["jobId"] == 1  # the start body rides along (partition)
    queue.record([Result(due[0].id, DeliveryStatus.PENDING, "NATS down")])
    assert queue.due() == []  # backoff
    clock.now += 10_000
    assert len(queue.due()) == 1
    assert admin.stats(box.store)["notify"] == {"delivered": 1, "pending": 1}
    box.close()


def test_a_run_cc_backend_refused_is_not_announced(tmp_path, clock):
    """NATS carries what cc-backend took: a later run it refused (start noted not held, stop
    put into the held run's metaData) is no message; the run it holds is."""
    box = Outbox(tmp_path / "n.sqlite", clock=clock, notify=True)
    box.enqueue([start(1, t=100), stop(1, t=100), start(1, t=200), stop(1, t=200)])
    while due := box.queue.due():  # one event of a job id at a time
        box.queue.record([Result(e.id, DeliveryStatus.DELIVERED,
                                 f"{NOT_HELD}cc-backend holds the run of 100" if
                                 e.start_time == 200 else "") for e in due])
    announced = []
    while due := box.notifications().due():
        announced += [(e.start_time, e.kind) for e in due]
        box.notifications().record([Result(e.id, DeliveryStatus.DELIVERED) for e in due])
    assert announced == [(100, "start"), (100, "stop")]
    box.close()


def test_redelivered_start_is_announced_once(tmp_path, clock):
    box = Outbox(tmp_path / "n.sqlite", clock=clock, notify=True)
    box.enqueue([start(1)])
    ev = box.queue.due()[0]
    box.queue.record([Result(ev.id, DeliveryStatus.DELIVERED)])
    box.notifications().record([Result(ev.id, DeliveryStatus.DELIVERED)])
    assert box.reopen_start("c", 1, 100)  # cc-backend lost it: REST again, NATS not again
    box.queue.record([Result(ev.id, DeliveryStatus.DELIVERED)])
    assert box.notifications().due() == []
    box.close()


def test_compaction_keeps_events_whose_notification_is_owed(tmp_path, clock):
    box = Outbox(tmp_path / "n.sqlite", clock=clock, notify=True)
    box.enqueue([start(1), start(2), stop(1), stop(2)])
    while evs := box.queue.due():
        box.queue.record([Result(e.id, DeliveryStatus.DELIVERED) for e in evs])
    owed = {e.id for e in box.notifications().due()}
    box.notifications().record([Result(i, DeliveryStatus.DELIVERED) for i in sorted(owed)[:1]])
    clock.now += 100_000
    assert box.compact(keep_seconds=3600) == 1  # job 1's start: delivered and announced
    owed = box.notifications().due()
    # job 2: its stop waits behind its start, as in the outbox
    assert sorted((e.job_id, e.kind) for e in owed) == [(1, "stop"), (2, "start")]
    box.close()


def test_compaction_never_forgets_the_start_of_a_run_still_open(tmp_path, clock):
    """A job running longer than slurmQueryMaxSpan keeps its start: its stop, a week later,
    embeds it (a stop answered 404 delivers the start first), and stale-jobs watches it."""
    box = Outbox(tmp_path / "n.sqlite", clock=clock)
    box.enqueue([start(1)])
    box.queue.record([Result(e.id, DeliveryStatus.DELIVERED) for e in box.queue.due()])
    clock.now += 30 * 86400
    assert box.compact(keep_seconds=7 * 86400) == 0
    assert box.open_runs("c") == [(1, 100)]
    box.enqueue([stop(1)])
    (ev,) = box.queue.due()
    assert ev.payload["start"]["jobId"] == 1
    box.close()


def test_without_nats_no_notifications_are_kept(box):
    box.enqueue([start(1)])
    box.queue.record([Result(e.id, DeliveryStatus.DELIVERED) for e in box.queue.due()])
    assert box.notifications().due() == [] and admin.stats(box.store)["notify"] == {}


def test_full_disk_is_an_outbox_error_and_leaves_no_open_transaction(tmp_path, clock):
    from ccadapter.errors import OutboxError

    box = Outbox(tmp_path / "full.sqlite", clock=clock)
    box.enqueue([start(1)])
    pages = box.store._db.execute("PRAGMA page_count").fetchone()[0]
    box.store._db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own "disk full"
    big = NewEvent("c", 2, 100, "start", {"jobId": 2, "script": "x" * 200_000})
    with pytest.raises(OutboxError, match="full"):
        box.enqueue([big])
    assert not box.store._db.in_transaction
    box.store._db.execute("PRAGMA max_page_count = 1073741823")  # space again
    assert box.enqueue([big]) == 1  # the next transaction works
    assert {e.job_id for e in box.queue.due()} == {1, 2}
    box.close()


def test_known_starts_and_a_richer_start_keeps_the_stored_script(box):
    scripted = NewEvent("c", 5, 100, "start", {"jobId": 5, "metaData": {"jobScript": "#!/x"}})
    box.enqueue([scripted, start(6, t=200)])
    assert box.known_starts([(5, 100), (5, 999), (6, 200), (7, 1)]) == {(5, 100), (6, 200)}
    rich = NewEvent("c", 5, 100, "start", {"jobId": 5, "metaData": {"jobName": "n"},
                                           "resources": [{"hwthreads": [0]}]}, rich=True)
    box.enqueue([rich])  # a later window did not fetch the script again
    (ev,) = [e for e in box.queue.due() if e.job_id == 5]
    assert ev.payload["resources"] == [{"hwthreads": [0]}]
    assert ev.payload["metaData"] == {"jobName": "n", "jobScript": "#!/x"}


def test_due_reads_pending_rows_in_id_order_without_sorting_the_backlog(box):
    """With 100k events queued, sorting every pending row for each batch of 256 made
    delivery slow down as the backlog grew (533 events/s at 100k jobs)."""
    from ccadapter.outbox.queue import EVENTS, NOTIFY

    for spec in (EVENTS, NOTIFY):
        with box.store.read() as db:
            plan = " ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN " + spec.due_query,
                                                     {"now": 0, "limit": 1}))
        assert "TEMP B-TREE" not in plan and "_pending" in plan, plan


def test_needs_names_only_what_the_outbox_cannot_answer(box):
    box.enqueue([start(1), start(2, rich=True), stop(2), start(3, rich=True)])
    listed = [(1, 100, False),   # start pending without allocation: a richer one may come
              (2, 100, True),    # start and stop stored
              (3, 100, True),    # ended: its stop is missing
              (3, 50, True),     # an earlier run of job 3 (requeued): nothing stored
              (4, 100, False)]   # new
    details, starts = box.needs("c", listed)
    assert details == {1, 3, 4} and starts == {1, 3, 4}
    deliver_all(box)
    details, starts = box.needs("c", [(1, 100, False), (3, 100, True)])
    assert details == {3} and starts == set()  # delivered starts are never replaced


def test_open_runs_and_hosts_follow_starts_and_stops(box):
    box.enqueue([start(1, host="n1"), start(2, host="n2")])
    box.enqueue([NewEvent("c", 3, 100, "start",
                          {"resources": [{"hostname": "n1"}, {"hostname": "n3"}]})])
    assert box.open_runs("c") == [(1, 100), (2, 100), (3, 100)]
    box.enqueue([stop(2)])
    assert box.open_runs("c") == [(1, 100), (3, 100)] and box.open_runs("other") == []
    assert box.open_hosts("c") == {"n1": 1, "n3": 1}  # start(1)'s payload has no resources


def test_an_outbox_from_before_the_runs_table_is_filled_once(tmp_path, clock):
    import sqlite3

    path = tmp_path / "old.sqlite"
    box = Outbox(path, clock=clock)
    box.enqueue([NewEvent("c", 1, 100, "start", {"resources": [{"hostname": "n1"}]}),
                 NewEvent("c", 2, 100, "start", {"resources": [{"hostname": "n2"}]}),
                 stop(2)])
    box.close()
    db = sqlite3.connect(path)  # as an outbox written by the previous release
    db.execute("DROP TABLE runs")
    db.execute("DELETE FROM state WHERE key = 'schema.runs'")
    db.commit()
    db.close()
    box = Outbox(path, clock=clock)
    assert box.open_runs("c") == [(1, 100)] and box.open_hosts("c") == {"n1": 1}
    box.close()


def test_start_deliveries(box, clock):
    box.enqueue([start(1), start(2)])
    (first, _) = box.queue.due()
    box.queue.record([Result(first.id, DeliveryStatus.DELIVERED)])
    got = box.start_deliveries("c", [(1, 100), (2, 100), (2, 999)])
    assert got == {(1, 100): (DeliveryStatus.DELIVERED, clock.now),
                   (2, 100): (DeliveryStatus.PENDING, None)}


def test_changed_lists_what_a_cycle_added_or_replaced_stops_included(tmp_path, clock):
    """``sync --dry-run``'s view: new events, a start replaced by a richer one, a delivered
    start opened again; not the events that were there before and did not change."""
    box = Outbox(tmp_path / "o.sqlite", clock=clock)
    box.enqueue([start(1), start(2), start(3)])
    delivered = next(e for e in box.queue.due() if e.job_id == 3)
    box.queue.record([Result(delivered.id, DeliveryStatus.DELIVERED)])
    copy = Outbox.copy_of(tmp_path / "o.sqlite", tmp_path / "copy.sqlite")
    box.close()
    admin.track_changes(copy.store)
    copy.enqueue([NewEvent("c", 1, 100, "start", {"jobId": 1, "hwthreads": [0, 1]}, rich=True),
                  NewEvent("c", 1, 100, "stop", {"stop": {"jobId": 1}}),
                  start(4), NewEvent("c", 4, 100, "stop", {"stop": {"jobId": 4}})])
    copy.reopen_start("c", 3, 100)
    changed = [(e.job_id, e.kind) for e in admin.changed(copy.store)]
    assert sorted(changed) == [(1, "start"), (1, "stop"), (3, "start"), (4, "start"),
                               (4, "stop")]
    assert {e.job_id for e in copy.queue.due()} == {1, 2, 3, 4}  # stops held back by due()
    assert next(e for e in admin.changed(copy.store)
                if e.kind == "start" and e.job_id == 1).payload[
        "hwthreads"] == [0, 1]
    copy.close()
    original = Outbox(tmp_path / "o.sqlite", clock=clock)
    assert admin.stats(original.store)["counts"] == {"start:pending": 2, "start:delivered": 1}
    original.close()


def energy(job, t=100, joules=5):
    return NewEvent("c", job, t, "energy", {"jobId": job, "cluster": "c", "startTime": t,
                                           "payload": {"key": "energy", "value": str(joules)}})


def test_energy_only_after_its_stop(box):
    box.enqueue([start(1), stop(1), energy(1)])
    assert [e.kind for e in box.queue.due()] == ["start"]
    deliver_all(box)
    assert [e.kind for e in box.queue.due()] == ["stop"]
    deliver_all(box)
    assert [e.kind for e in box.queue.due()] == ["energy"]
    box.enqueue([energy(1, joules=9)])  # seen again (overlapping windows): nothing new
    deliver_all(box)
    assert box.queue.due() == [] and admin.stats(box.store)["counts"] == {
        "start:delivered": 1, "stop:delivered": 1, "energy:delivered": 1}


def test_energy_of_a_stop_delivered_before_it_was_known(box):
    """The hook's fast path stopped the run (no energy from slurmctld); slurmdbd's record,
    read later, adds the energy alone."""
    box.enqueue([start(1), stop(1)])
    deliver_all(box)
    deliver_all(box)
    assert box.enqueue([energy(1)]) == 1
    assert [e.kind for e in box.queue.due()] == ["energy"]


def test_needs_reads_finished_runs_until_their_energy_is_stored(box):
    box.enqueue([start(1, rich=True), stop(1), start(2, rich=True), stop(2), energy(2),
                 start(3, rich=True), start(4, rich=True), stop(4)])
    listed = [(1, 100, True), (2, 100, True), (3, 100, False), (4, 100, True)]
    recent = {(1, 100), (2, 100), (3, 100)}  # whose energy may still come (4 ended long ago)
    assert box.needs("c", listed) == (set(), set())  # energy not gathered: nothing to read
    assert box.needs("c", listed, energy=recent) == ({1}, set())  # 3 runs: no energy yet
    box.enqueue([energy(1)])
    assert box.needs("c", listed, energy=recent) == (set(), set())


OLD_SCHEMA = """
CREATE TABLE events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster         TEXT    NOT NULL,
    job_id          INTEGER NOT NULL,
    start_time      INTEGER NOT NULL,
    kind            TEXT    NOT NULL CHECK (kind IN ('start', 'stop', 'nodestate')),
    payload         TEXT    NOT NULL,
    rich            INTEGER NOT NULL DEFAULT 0,
    status          TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'rejected')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL    NOT NULL DEFAULT 0,
    last_error      TEXT,
    created_at      REAL    NOT NULL,
    delivered_at    REAL,
    UNIQUE (cluster, job_id, start_time, kind)
);
CREATE INDEX events_due ON events (status, next_attempt_at);
CREATE INDEX events_pending ON events (status, id);
CREATE INDEX events_delivered ON events (status, delivered_at);
"""


def test_an_outbox_from_before_energy_events_takes_them_keeping_every_row(tmp_path, clock):
    """The previous release's events table refuses kind 'energy' (a CHECK, which SQLite
    cannot alter): it is rebuilt once, rows, ids, indexes and the id counter kept."""
    import sqlite3

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)  # as the previous release left it
    db.executescript(OLD_SCHEMA)
    for job, kind, status in ((1, "start", "delivered"), (1, "stop", "pending"),
                              (2, "start", "delivered"), (3, "start", "pending")):
        db.execute("INSERT INTO events (cluster, job_id, start_time, kind, payload, status, "
                   "created_at) VALUES ('c', ?, 100, ?, '{}', ?, 5)", (job, kind, status))
    db.execute("DELETE FROM events WHERE job_id = 3")  # the newest id is gone...
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        db.execute("INSERT INTO events (cluster, job_id, start_time, kind, payload, "
                   "created_at) VALUES ('c', 1, 100, 'energy', '{}', 0)")
    db.commit()
    rows = db.execute("SELECT * FROM events ORDER BY id").fetchall()
    assert len(rows) == 3 and db.execute(
        "SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone() == (4,)
    db.close()  # ...but the counter remembers it

    box = Outbox(path, clock=clock)
    kept = box.store._db.execute("SELECT * FROM events ORDER BY id").fetchall()
    assert [r[:5] + r[6:] for r in kept] == [r[:5] + r[6:] for r in rows]
    # the start bodies moved to their own table (issue 35, item 11); a stop keeps its own
    assert [r[5] for r in kept] == ["", "{}", ""]
    assert box.store._db.execute("SELECT event_id, body FROM bodies ORDER BY event_id"
                                 ).fetchall() == [(1, "{}"), (3, "{}")]
    assert box.enqueue([energy(1)]) == 1
    assert box.store._db.execute("SELECT id FROM events WHERE kind = 'energy'").fetchall() == [
        (5,)]  # ids are never reused
    assert [e.kind for e in box.queue.due()] == ["stop"]  # and the energy waits for the stop
    indexes = {r[0] for r in box.store._db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' "
        "AND sql IS NOT NULL")}
    assert indexes == {"events_due", "events_pending", "events_delivered", "events_not_held"}
    assert box.open_runs("c") == [(2, 100)]  # the runs table was filled from the old rows
    box.close()
    box = Outbox(path, clock=clock)  # done once: the next open finds the new table
    assert admin.stats(box.store)["counts"]["energy:pending"] == 1
    box.close()


def test_statuses_on_disk_are_the_enum_values_as_plain_text(box, tmp_path, clock):
    """DeliveryStatus is a StrEnum: the file holds the same text as before it existed
    ('pending', 'delivered', 'rejected', type TEXT), rows written as plain strings read
    back, and JSON (``queue list``, ``status``) prints the bare value."""
    box.enqueue([start(1), start(2), start(3)])
    first, second, _ = box.queue.due()
    box.queue.record([Result(first.id, DeliveryStatus.DELIVERED),
                      Result(second.id, DeliveryStatus.REJECTED, "HTTP 400")])
    with box.store.read() as db:
        stored = db.execute("SELECT job_id, status, typeof(status) FROM events "
                            "ORDER BY job_id").fetchall()
    assert stored == [(1, "delivered", "text"), (2, "rejected", "text"),
                      (3, "pending", "text")]
    with box.store.tx() as db:  # as an outbox of an earlier release holds it
        db.execute("UPDATE events SET status = 'pending' WHERE job_id = 2")
    assert [e.job_id for e in box.queue.due()] == [2, 3]
    rows = admin.list_events(box.store, DeliveryStatus.PENDING)
    assert [(r["jobId"], r["status"]) for r in rows] == [(2, "pending"), (3, "pending")]
    assert json.dumps([DeliveryStatus.PENDING, DeliveryStatus.DELIVERED,
                       DeliveryStatus.REJECTED]) == '["pending", "delivered", "rejected"]'


def test_the_sql_spells_no_status_the_enum_lacks(box):
    """The schema's CHECK and the queries write statuses as SQL literals: each one is a
    DeliveryStatus value, and the CHECK of both queue tables admits exactly the enum."""
    values = {s.value for s in DeliveryStatus}
    with box.store.read() as db:
        for table in ("events", "notify"):
            (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = ?",
                                (table,)).fetchone()
            check = re.search(r"CHECK \(status IN \(([^)]*)\)\)", sql)
            assert check and set(re.findall(r"'(\w+)'", check.group(1))) == values, table
    source = "".join(p.read_text() for p in Path(outbox_package.__file__).parent.glob("*.py"))
    spelled = re.findall(r"status\s*(?:=|!=|IN)\s*\(?((?:'\w+'(?:,\s*)?)+)", source)
    literals = {v for group in spelled for v in re.findall(r"'(\w+)'", group)}
    assert literals and literals <= values


def big_start(job, t=100, script=4000):
    return NewEvent("c", job, t, "start", {"jobId": job, "startTime": t, "resources": [
        {"hostname": "n1"}], "metaData": {"jobScript": "#" * script, "slurmInfo": "x" * 2000}},
        True)


def big_stop(job, t=100):
    return NewEvent("c", job, t, "stop", {"stop": {"jobId": job, "cluster": "c",
                                                   "startTime": t, "stopTime": t + 60,
                                                   "jobState": "completed"},
                                          "start": big_start(job, t).payload})


def test_a_lost_stop_can_be_sent_again_however_long_ago_it_was_delivered(box, clock):
    """Issue 35, item 1: the hourly compaction emptied the body of a delivered stop, so a
    stop cc-backend lost (its stop/commit race) could never be sent again: cc-cache, every
    ccPollInterval, reopened nothing and said nothing. The stop's own body is kept as long
    as its event; only the start it carried goes."""
    box.enqueue([big_start(1), big_stop(1)])
    deliver_all(box)
    deliver_all(box)
    clock.now += 6 * 3600  # a cc-cache cycle later
    box.compact(keep_seconds=7 * 86400)
    assert box.reopen_start("c", 1, 100, kind="stop")
    (again,) = box.queue.due()
    assert again.kind == "stop" and again.payload["stop"]["jobState"] == "completed"


def test_compaction_keeps_what_a_resend_needs_and_drops_the_rest(box, clock):
    """Issue 35, item 11: delivered start bodies (scripts, slurmInfo) were kept 7 days even
    for closed runs. An hour after its stop was delivered a run's start body goes, and the
    copy of it its stop carried; an open run keeps its start (its stop, a 404, cc-cache)."""
    box.enqueue([big_start(1), big_stop(1), big_start(2)])
    deliver_all(box)
    deliver_all(box)
    clock.now += 2 * 3600
    box.compact(keep_seconds=7 * 86400)
    with box.store.read() as db:
        kept = {(j, k): p for j, k, p in db.execute(
            "SELECT job_id, kind, coalesce((SELECT body FROM bodies WHERE event_id = id), "
            "payload) FROM events")}
    assert kept[(1, "start")] == ""
    assert json.loads(kept[(1, "stop")]) == {"stop": big_stop(1).payload["stop"]}
    assert json.loads(kept[(2, "start")]) == big_start(2).payload  # still running
    assert box.enqueue([big_start(1), big_stop(1)]) == 0  # still idempotent


def test_rejected_events_and_notifications_are_pruned_after_30_days(tmp_path, clock, caplog):
    """Issue 35, item 11: rejected events and rejected NATS notifications were never pruned
    (a rejected notification even kept its event for ever). After 30 days they go, said."""
    import logging

    box = Outbox(tmp_path / "r.sqlite", clock=clock, notify=True)
    box.enqueue([big_start(1), big_start(2), big_start(3)])
    one, two, three = box.queue.due()
    box.queue.record([Result(one.id, DeliveryStatus.REJECTED, "HTTP 400: bad"),
                      Result(two.id, DeliveryStatus.DELIVERED),
                      Result(three.id, DeliveryStatus.DELIVERED)])
    box.enqueue([big_stop(2), big_stop(3)])
    deliver_all(box)
    while owed := box.notifications().due():  # starts first, then their stops
        box.notifications().record([Result(e.id, DeliveryStatus.REJECTED, "too large")
                                    for e in owed])
    clock.now += 29 * 86400
    box.compact(keep_seconds=7 * 86400)
    assert admin.stats(box.store)["rejected"] == 1
    clock.now += 2 * 86400
    with caplog.at_level(logging.WARNING):
        box.compact(keep_seconds=7 * 86400)
    with box.store.read() as db:
        assert db.execute("SELECT count(*) FROM events").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM notify").fetchone()[0] == 0
    assert "rejected" in caplog.text
    box.close()


def test_the_outbox_file_shrinks_when_compaction_frees_it(tmp_path, clock):
    """Issue 35, item 11: the file was never vacuumed: a backlog's pages stayed for good."""
    box = Outbox(tmp_path / "v.sqlite", clock=clock)
    box.enqueue([e for job in range(1, 2001) for e in (big_start(job), big_stop(job))])
    while deliver_all(box):
        pass
    box.store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    full = box.path.stat().st_size
    clock.now += 8 * 86400
    box.compact(keep_seconds=7 * 86400)
    box.store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert box.path.stat().st_size < full / 4, (full, box.path.stat().st_size)
    box.close()


def test_a_month_of_jobs_keeps_the_outbox_flat_after_its_retention(tmp_path, clock):
    """Issue 35, item 11: 30 simulated days of 300 jobs a day, compacted hourly as the
    daemon does: the file after 30 days is no larger than after 9 (retention 7 days)."""
    box = Outbox(tmp_path / "m.sqlite", clock=clock)
    sizes = {}
    job = 0
    for day in range(1, 31):
        for _hour in range(24):
            batch = [job + i for i in range(1, 13)]
            job += 12
            box.enqueue([e for j in batch for e in (big_start(j, int(clock.now)),
                                                    big_stop(j, int(clock.now)))])
            while deliver_all(box):
                pass
            clock.now += 3600
            box.compact(keep_seconds=7 * 86400)
        box.store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        sizes[day] = box.path.stat().st_size
    assert sizes[30] <= sizes[9] * 1.1, sizes
    box.close()
