"""The durable outbox: every start, stop, nodestate and energy event is on disk before anyone
may count it as handled, and leaves only when cc-backend took it.

An event is identified by (cluster, jobId, startTime, kind): enqueueing it twice is a
no-op, so overlapping Slurm windows, restarts and hook-plus-poll double sightings never
become double deliveries. The order per job is the queue's business
(:mod:`ccadapter.outbox.queue`), the file's and its transactions the store's
(:mod:`ccadapter.outbox.store`); the operator's commands are in
:mod:`ccadapter.outbox.operator`.

With NATS notifications on (REST and NATS both), an event cc-backend took gets a row in
``notify`` in the same transaction that records the delivery, so a notification survives a
crash like the event did; :meth:`Outbox.notifications` drains those rows.

Allocation details (hwthreads, GPUs) are captured at first sight: a pending start is only ever
replaced by a richer one (one that carries allocation details), and a stop carries the start
body stored for its run, so that a stop answered 404 can deliver the start first, hours later
(the body rules are :func:`with_start` and :func:`keep_script`).

What is kept, and for how long (:meth:`Outbox.compact`, hourly), bounds the file:
- every event of the last ``slurmQueryMaxSpan`` (7 days), so overlapping windows never send
  one twice; a run still open keeps its start however old;
- the body of a start while its run is open, and for an hour after its stop went out (a
  start body carries the batch script and ``slurmInfo``: kilobytes);
- the body of a stop as long as its event (a stop cc-backend lost is sent again from it,
  ``reopen_start``), without the copy of the start it carried after that hour;
- rejected events and NATS notifications for 30 days (:data:`REJECTED_KEEP`);
- node states for an hour. Freed pages go back to the file system (incremental vacuum).
At 50,000 jobs a day that is a week of small rows and an hour of bodies; BENCHMARKS.md gives
the size measured ("Outbox size over a month").
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccadapter.model import EventKind
from ccadapter.outbox.queue import EVENTS, NOTIFY, DeliveryQueue, DeliveryStatus
from ccadapter.outbox.store import (
    Store,
    batches,
    copy_file,
    get_state,
    marks,
    put_state,
)
from ccadapter.retry import RetryPolicies, RetryPolicy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NewEvent:
    cluster: str
    job_id: int
    start_time: int
    kind: EventKind
    payload: dict[str, Any]
    rich: bool = False  # carries allocation details captured from slurmctld


class Outbox:
    """The events of a state directory: what the reconcilers and the fast path enqueue
    and ask about, and (``queue``) what the deliverer drains."""

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time,
                 backoff: RetryPolicy | None = None, notify: bool = False,
                 on_enqueued: Callable[[EventKind, int], None] | None = None,
                 store: Store | None = None) -> None:
        """``on_enqueued(kind, count)`` hears of new events once they are committed
        (the daemon's metrics). ``store``: the file opened already (:meth:`reader`)."""
        self.store = store or Store(path, clock)
        self.path = self.store.path
        self.notify = notify  # queue a NATS notification for every delivered start/stop
        self.backoff = backoff or RetryPolicies().outbox
        self.on_enqueued = on_enqueued
        self.queue = DeliveryQueue(self.store, EVENTS, self.backoff, self._owe_notification)

    @classmethod
    def reader(cls, path: str | Path, clock: Callable[[], float] = time.time) -> Outbox:
        """The outbox opened read-only (``status``, ``queue list``): see :meth:`Store.reader`.
        Its readers work; a write fails."""
        return cls(path, clock, store=Store.reader(path, clock))

    def close(self) -> None:
        self.store.close()

    def notifications(self) -> DeliveryQueue:
        """The NATS notifications owed for delivered events, as a queue to drain."""
        return DeliveryQueue(self.store, NOTIFY, self.backoff)

    def _owe_notification(self, db: sqlite3.Connection, event_id: int) -> None:
        if self.notify:
            db.execute("INSERT OR IGNORE INTO notify (event_id) SELECT id FROM events "
                       "WHERE id = ? AND kind IN ('start', 'stop')", (event_id,))

    # --- writers -------------------------------------------------------------------------

    def enqueue(self, events: Iterable[NewEvent]) -> int:
        """Store events in one transaction; returns how many were new."""
        now = self.store.clock()
        added: Counter[EventKind] = Counter()
        with self.store.tx() as db:
            for ev in events:
                added[ev.kind] += self._enqueue_one(db, ev, now)
        if self.on_enqueued:
            for kind, count in added.items():
                if count:
                    self.on_enqueued(kind, count)
        return added.total()

    def _enqueue_one(self, db: sqlite3.Connection, ev: NewEvent, now: float) -> int:
        payload = ev.payload
        run = (ev.cluster, ev.job_id, ev.start_time)
        if ev.kind == EventKind.NODESTATE:  # only the newest state of a cluster matters
            db.execute("DELETE FROM events WHERE kind = 'nodestate' AND cluster = ? "
                       "AND status != 'delivered'", (ev.cluster,))
        if ev.kind == EventKind.STOP:
            row = db.execute(
                "SELECT payload FROM events WHERE cluster = ? AND job_id = ? AND start_time = ? "
                "AND kind = 'start' AND payload != ''", run).fetchone()
            if row:  # the start captured at first sight is the richest we will ever have
                payload = with_start(payload, json.loads(row[0]))
            db.execute("DELETE FROM runs WHERE cluster = ? AND job_id = ? AND start_time = ?",
                       run)
        cur = db.execute(
            "INSERT OR IGNORE INTO events (cluster, job_id, start_time, kind, payload, rich, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*run, ev.kind, dumps(payload), int(ev.rich), now))
        if ev.kind == EventKind.START and cur.rowcount:
            db.execute(
                "INSERT OR IGNORE INTO runs (cluster, job_id, start_time, hosts) SELECT ?, ?, ?, ? "
                "WHERE NOT EXISTS (SELECT 1 FROM events WHERE cluster = ? AND job_id = ? "
                "AND start_time = ? AND kind = 'stop')",
                (*run, start_hosts(payload), *run))
        if cur.rowcount:
            return 1
        if ev.kind == EventKind.START and ev.rich:
            row = db.execute(
                "SELECT payload FROM events WHERE cluster = ? AND job_id = ? AND start_time = ? "
                "AND kind = 'start' AND status = 'pending' AND rich = 0", run).fetchone()
            if row:
                db.execute(
                    "UPDATE events SET payload = ?, rich = 1 WHERE cluster = ? AND job_id = ? "
                    "AND start_time = ? AND kind = 'start'",
                    (dumps(keep_script(payload, json.loads(row[0]))), *run))
        return 0

    def compact(self, keep_seconds: float) -> int:
        """Keep the outbox to what a site needs of it, within a bound (see the module
        docstring); returns how many events were forgotten. Reads only the events old
        enough to change (index on status, delivered_at)."""
        now = self.store.clock()
        with self.store.tx() as db:
            gone = self._prune_rejected(db, now)
            gone += db.execute(
                "DELETE FROM events WHERE status = 'delivered' AND delivered_at < ? "
                "AND id NOT IN (SELECT event_id FROM notify WHERE status != 'delivered') "
                "AND NOT (kind = 'start' AND EXISTS (SELECT 1 FROM runs r WHERE "
                "r.cluster = events.cluster AND r.job_id = events.job_id "
                "AND r.start_time = events.start_time))",
                (now - keep_seconds,)).rowcount
            gone += db.execute("DELETE FROM events WHERE kind = 'nodestate' AND status = "
                               "'delivered' AND delivered_at < ?", (now - 3600,)).rowcount
            mark = float(get_state(db, _PAYLOADS_DROPPED) or 0.0)
            span = (mark - 3600, now - 3600)  # delivered in the hour that just passed 1 h
            # a run whose stop went out over an hour ago: its start body (scripts,
            # slurmInfo) is needed no more, nor the copy its stop carried for a 404; the
            # stop's own body stays as long as the event, to be sent again if lost
            db.execute("UPDATE events SET payload = '' WHERE kind = 'start' AND payload != '' "
                       "AND status = 'delivered' AND (cluster, job_id, start_time) IN ("
                       "SELECT cluster, job_id, start_time FROM events INDEXED BY "
                       "events_delivered WHERE status = 'delivered' AND delivered_at >= ? "
                       "AND delivered_at < ? AND kind = 'stop') AND id NOT IN (SELECT "
                       "event_id FROM notify WHERE status != 'delivered')", span)
            db.execute("UPDATE events SET payload = json_remove(payload, '$.start') "
                       "WHERE status = 'delivered' AND delivered_at >= ? AND delivered_at < ? "
                       "AND kind = 'stop' AND payload != '' AND id NOT IN (SELECT event_id "
                       "FROM notify WHERE status != 'delivered')", span)
            db.execute("UPDATE events SET payload = '' WHERE status = 'delivered' AND "
                       "delivered_at >= ? AND delivered_at < ? AND kind = 'energy' AND "
                       "payload != ''", span)
            put_state(db, _PAYLOADS_DROPPED, repr(now - 3600))
            db.execute("DELETE FROM notify WHERE event_id NOT IN (SELECT id FROM events)")
        self.store.vacuum()
        return gone

    def _prune_rejected(self, db: sqlite3.Connection, now: float) -> int:
        """Rejected events and rejected NATS notifications older than
        :data:`REJECTED_KEEP` (an operator had a month to retry them): forgotten, and said."""
        horizon = now - REJECTED_KEEP
        notes = db.execute("DELETE FROM notify WHERE status = 'rejected' AND event_id IN ("
                           "SELECT id FROM events WHERE delivered_at < ?)", (horizon,)).rowcount
        rows = db.execute("SELECT id, cluster, job_id, kind FROM events WHERE status = "
                          "'rejected' AND created_at < ? ORDER BY id", (horizon,)).fetchall()
        for chunk in batches([r[0] for r in rows]):
            db.execute(f"DELETE FROM events WHERE id IN ({marks(chunk)})", chunk)
        if rows or notes:
            log.warning("outbox: %d rejected event(s) and %d rejected NATS notification(s) "
                        "older than %d days forgotten (never delivered; e.g. %s)", len(rows),
                        notes, REJECTED_KEEP // 86400, ", ".join(
                            f"{kind} of job {job} ({cluster})" for _, cluster, job, kind
                            in rows[:3]) or "notifications only")
        return len(rows)

    @classmethod
    def copy_of(cls, source: str | Path, target: str | Path) -> Outbox:
        """A copy to experiment on (``sync --dry-run``); the source is neither changed nor
        created (a missing one is an error)."""
        copy_file(source, target)
        return cls(target)

    # --- readers -------------------------------------------------------------------------

    def known_starts(self, runs: list[tuple[int, int]], cluster: str | None = None
                     ) -> set[tuple[int, int]]:
        """Of these runs (jobId, startTime), the ones whose start is stored already (of
        ``cluster``, if given: two clusters of one slurmdbd count job ids each on its own)."""
        found: set[tuple[int, int]] = set()
        where = "" if cluster is None else " AND cluster = ?"
        with self.store.read() as db:
            for chunk in batches(sorted({j for j, _ in runs})):
                found.update(db.execute(
                    f"SELECT job_id, start_time FROM events WHERE kind = 'start' AND job_id IN "
                    f"({marks(chunk)}){where}",
                    [*chunk, *([] if cluster is None else [cluster])]).fetchall())
        return found & set(runs)

    def open_runs(self, cluster: str) -> list[tuple[int, int]]:
        """(jobId, startTime) of runs whose start is queued or delivered and whose stop is
        not known yet: what cc-backend shows (or will show) as running."""
        with self.store.read() as db:
            rows = db.execute(_OPEN + " ORDER BY r.job_id", (cluster,)).fetchall()
        return [(r[0], r[1]) for r in rows]

    def open_hosts(self, cluster: str) -> Counter[str]:
        """How many open runs each host carries (nodestate's ``jobsRunning``)."""
        counts: Counter[str] = Counter()
        with self.store.read() as db:
            for (hosts,) in db.execute(_OPEN_HOSTS, (cluster,)):
                counts.update(h for h in hosts.split(",") if h)
        return counts

    def needs(self, cluster: str, runs: Iterable[tuple[int, int, bool]], *,
              energy: Collection[tuple[int, int]] = ()) -> tuple[set[int], set[int]]:
        """Of listed runs (jobId, startTime, finished), which the outbox cannot answer yet:
        returns (ids to read in detail, ids among them whose start may be needed). A run
        needs reading when its start is not stored, when it finished and its stop is not
        stored, or when its start waits undelivered without allocation details (a richer
        one may be had while slurmctld holds the job). Runs named in ``energy`` (finished
        runs whose energy may still come) need reading while no energy event is stored for
        them: their stop came from slurmctld (the hook's fast path cannot see energy) or
        from a slurmdbd record read before the energy reached it."""
        wanted = list(runs)
        stored: dict[tuple[int, int], dict[str, tuple[str, int]]] = {}
        with self.store.read() as db:
            for chunk in batches(sorted({j for j, _, _ in wanted})):
                for job_id, start, kind, status, rich in db.execute(
                        "SELECT job_id, start_time, kind, status, rich FROM events WHERE "
                        f"cluster = ? AND job_id IN ({marks(chunk)}) AND kind != 'nodestate'",
                        (cluster, *chunk)):
                    stored.setdefault((job_id, start), {})[kind] = (status, rich)
        details: set[int] = set()
        starts: set[int] = set()
        for job_id, start, finished in wanted:
            have = stored.get((job_id, start), {})
            first = have.get(EventKind.START)
            if first is None or (first == (DeliveryStatus.PENDING, 0)):
                details.add(job_id)
                starts.add(job_id)
            elif finished and (EventKind.STOP not in have or (
                    EventKind.ENERGY not in have and (job_id, start) in energy)):
                details.add(job_id)
        return details, starts

    def start_deliveries(self, cluster: str, runs: Iterable[tuple[int, int]], kind: str = "start"
                         ) -> dict[tuple[int, int], tuple[str, float | None]]:
        """(status, delivered_at) of the stored starts (or ``kind`` events) of these runs
        (cc-cache)."""
        wanted = set(runs)
        out: dict[tuple[int, int], tuple[str, float | None]] = {}
        with self.store.read() as db:
            for chunk in batches(sorted({j for j, _ in wanted})):
                for job_id, start, status, at in db.execute(
                        "SELECT job_id, start_time, status, delivered_at FROM events WHERE "
                        f"cluster = ? AND kind = ? AND job_id IN ({marks(chunk)})",
                        (cluster, kind, *chunk)):
                    if (job_id, start) in wanted:
                        out[(job_id, start)] = (status, at)
        return out

    def stops_delivered(self, cluster: str, since: float, until: float
                        ) -> list[tuple[int, int]]:
        """(jobId, startTime) of the runs whose stop was delivered in [since, until)."""
        with self.store.read() as db:
            return [(j, s) for j, s in db.execute(
                "SELECT job_id, start_time FROM events INDEXED BY events_delivered WHERE "
                "status = 'delivered' AND delivered_at >= ? AND delivered_at < ? AND "
                "kind = 'stop' AND cluster = ?", (since, until, cluster))]

    def reopen_start(self, cluster: str, job_id: int, start_time: int, kind: str = "start"
                     ) -> bool:
        """cc-backend lost a run we delivered (or its stop, ``kind="stop"``): send it again.
        False when it is not delivered here, or its body was compacted away."""
        with self.store.tx() as db:
            return bool(db.execute(
                "UPDATE events SET status = 'pending', next_attempt_at = 0 WHERE cluster = ? "
                "AND job_id = ? AND start_time = ? AND kind = ? AND status = 'delivered' "
                "AND payload != ''", (cluster, job_id, start_time, kind)).rowcount)


_OPEN = ("SELECT r.job_id, r.start_time FROM runs r JOIN events e ON e.cluster = r.cluster "
         "AND e.job_id = r.job_id AND e.start_time = r.start_time AND e.kind = 'start' "
         "WHERE r.cluster = ? AND e.status != 'rejected'")
_OPEN_HOSTS = _OPEN.replace("SELECT r.job_id, r.start_time", "SELECT r.hosts")
_PAYLOADS_DROPPED = "compact.payloads_dropped_before"
# How long a rejected event (or NATS notification) is kept for the operator to retry it.
REJECTED_KEEP = 30 * 86400


def dumps(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def with_start(stop_body: dict[str, Any], start_body: dict[str, Any]) -> dict[str, Any]:
    """A stop as the outbox keeps it: with the start body stored for its run, so that a
    stop answered 404 (cc-backend lost the job) can deliver the start first."""
    return {**stop_body, "start": start_body}


def keep_script(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """A richer start replaces a stored one; the batch script the stored one carried stays
    (the window does not fetch a script again for a run it has seen)."""
    script = (old.get("metaData") or {}).get("jobScript")
    meta = new.get("metaData") or {}
    if not script or meta.get("jobScript"):
        return new
    return {**new, "metaData": {**meta, "jobScript": script}}


def start_hosts(start_body: dict[str, Any]) -> str:
    """The hosts of a start body, comma-separated (the outbox's ``runs`` table)."""
    return ",".join(r.get("hostname", "") for r in start_body.get("resources") or ())
