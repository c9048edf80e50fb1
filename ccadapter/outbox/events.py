"""The durable outbox: every start, stop, nodestate and energy event is on disk before anyone
may count it as handled, and leaves only when cc-backend took it.

An event is identified by (cluster, jobId, startTime, kind): enqueueing it twice is a
no-op, so overlapping Slurm windows, restarts and hook-plus-poll double sightings never
become double deliveries. The order per job is the queue's business
(:mod:`ccadapter.outbox.queue`), the file's and its transactions the store's
(:mod:`ccadapter.outbox.store`); the operator's commands are in
:mod:`ccadapter.outbox.admin`.

With NATS notifications on (REST and NATS both), an event cc-backend took gets a row in
``notify`` in the same transaction that records the delivery, so a notification survives a
crash like the event did; :meth:`Outbox.notifications` drains those rows.

Allocation details (hwthreads, GPUs) are captured at first sight: a pending start is only ever
replaced by a richer one (one that carries allocation details, :func:`keep_script`), and a
stop is delivered with the start body stored for its run beside it, so that a stop answered
404 can deliver the start first, hours later.

What is kept, and for how long, bounds the file: :mod:`ccadapter.outbox.retention`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccadapter.model import EventKind
from ccadapter.outbox.queue import (
    EVENTS,
    HELD_ROWS,
    NOT_HELD_ROWS,
    NOTIFY,
    DeliveryQueue,
    DeliveryStatus,
)
from ccadapter.outbox.retention import compact
from ccadapter.outbox.store import (
    Store,
    batches,
    copy_file,
    marks,
)
from ccadapter.retry import RetryPolicies, RetryPolicy


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
        """NATS hears what cc-backend took: no run it refused (start and stop NOT_HELD)."""
        if self.notify:
            db.execute("INSERT OR IGNORE INTO notify (event_id) SELECT id FROM events "
                       f"WHERE id = ? AND kind IN ('start', 'stop') AND {HELD_ROWS}",
                       (event_id,))

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
        """A start's body goes into the bodies table, its row holds none; a stop keeps its
        own body only: delivery reads the start body stored for its run beside it (the one
        captured at first sight, the richest we will ever have; queue.PAYLOAD). A stop whose
        run has no start body stored (its start dropped by the operator) keeps the one it
        came with, until an hour after its delivery."""
        run = (ev.cluster, ev.job_id, ev.start_time)
        row_payload = ev.payload
        if ev.kind == EventKind.NODESTATE:  # only the newest state of a cluster matters
            db.execute("DELETE FROM events WHERE kind = 'nodestate' AND cluster = ? "
                       "AND status != 'delivered'", (ev.cluster,))
        elif ev.kind == EventKind.STOP:
            if db.execute(_START_BODY, run).fetchone():
                row_payload = {"stop": ev.payload["stop"]}  # the stored start goes beside it
            db.execute("DELETE FROM runs WHERE cluster = ? AND job_id = ? AND start_time = ?",
                       run)
        elif ev.kind == EventKind.START:
            row_payload = {}
        cur = db.execute(
            "INSERT OR IGNORE INTO events (cluster, job_id, start_time, kind, payload, rich, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*run, ev.kind, dumps(row_payload) if row_payload else "", int(ev.rich), now))
        if ev.kind == EventKind.START and cur.rowcount:
            db.execute("INSERT INTO bodies (event_id, body) VALUES (?, ?)",
                       (cur.lastrowid, dumps(ev.payload)))
            db.execute(
                "INSERT OR IGNORE INTO runs (cluster, job_id, start_time, hosts) SELECT ?, ?, ?, ? "
                "WHERE NOT EXISTS (SELECT 1 FROM events WHERE cluster = ? AND job_id = ? "
                "AND start_time = ? AND kind = 'stop')",
                (*run, start_hosts(ev.payload), *run))
        if cur.rowcount:
            return 1
        if ev.kind == EventKind.START and ev.rich:
            row = db.execute(
                "SELECT e.id, b.body FROM events e JOIN bodies b ON b.event_id = e.id "
                "WHERE e.cluster = ? AND e.job_id = ? AND e.start_time = ? AND e.kind = 'start' "
                "AND e.status = 'pending' AND e.rich = 0", run).fetchone()
            if row:
                db.execute("UPDATE bodies SET body = ? WHERE event_id = ?",
                           (dumps(keep_script(ev.payload, json.loads(row[1]))), row[0]))
                db.execute("UPDATE events SET rich = 1 WHERE id = ?", (row[0],))
        return 0

    def compact(self, keep_seconds: float) -> int:
        """Keep the outbox within its bound (:mod:`ccadapter.outbox.retention`); returns how
        many events were forgotten."""
        gone = compact(self.store, keep_seconds)
        self.store.vacuum()
        return gone

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

    def latest_run(self, cluster: str, job_id: int) -> str | None:
        """What the outbox holds of the job's latest run: "stop" (its stop, so it ended),
        "start" (its start only: running), None (nothing, or only what is older than the
        outbox keeps). The hook's fast path asks this before it asks slurmctld."""
        return latest_runs(self.store, cluster, [job_id]).get(job_id)

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

    def stop_bodies(self, cluster: str, runs: Iterable[tuple[int, int]]
                    ) -> dict[tuple[int, int], dict[str, Any]]:
        """The stop bodies of these runs, where kept (cc-cache says what a lost stop did)."""
        wanted = set(runs)
        out: dict[tuple[int, int], dict[str, Any]] = {}
        with self.store.read() as db:
            for chunk in batches(sorted({j for j, _ in wanted})):
                for job_id, start, payload in db.execute(
                        "SELECT job_id, start_time, payload FROM events WHERE cluster = ? AND "
                        f"kind = 'stop' AND payload != '' AND job_id IN ({marks(chunk)})",
                        (cluster, *chunk)):
                    if (job_id, start) in wanted:
                        out[(job_id, start)] = json.loads(payload).get("stop") or {}
        return out

    def not_held(self, cluster: str, runs: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
        """Of these runs, those cc-backend holds no job of (queue.NOT_HELD): its duplicate
        rule refused their start; sending it again would change nothing."""
        wanted = set(runs)
        with self.store.read() as db:
            found = set(db.execute(f"SELECT job_id, start_time FROM events WHERE cluster = ? "
                                   f"AND {NOT_HELD_ROWS}", (cluster,)).fetchall())
        return found & wanted

    def held_instead(self, cluster: str, job_id: int, start_time: int) -> int | None:
        """:func:`run_held_instead` in this outbox."""
        return run_held_instead(self.store, cluster, job_id, start_time)

    def stops_delivered(self, cluster: str, since: float, until: float
                        ) -> dict[tuple[int, int], dict[str, Any]]:
        """The stop bodies of the runs whose stop was delivered in [since, until), by
        (jobId, startTime) ({} where compaction emptied one), but those cc-backend holds no
        job of (its duplicate rule refused them: queue.NOT_HELD)."""
        with self.store.read() as db:
            rows = db.execute(
                "SELECT job_id, start_time, payload FROM events INDEXED BY events_delivered "
                "WHERE status = 'delivered' AND delivered_at >= ? AND delivered_at < ? AND "
                f"kind = 'stop' AND cluster = ? AND {HELD_ROWS}", (since, until, cluster)
            ).fetchall()
        return {(j, s): (json.loads(p).get("stop") or {}) if p else {} for j, s, p in rows}

    def reopen_start(self, cluster: str, job_id: int, start_time: int, kind: str = "start"
                     ) -> bool:
        """cc-backend lost a run we delivered (or its stop, ``kind="stop"``): send it again.
        False when it is not delivered here, or its body was compacted away."""
        body = ("EXISTS (SELECT 1 FROM bodies WHERE event_id = events.id)" if kind == "start"
                else "payload != ''")
        with self.store.tx() as db:
            return bool(db.execute(
                "UPDATE events SET status = 'pending', next_attempt_at = 0 WHERE cluster = ? "
                "AND job_id = ? AND start_time = ? AND kind = ? AND status = 'delivered' "
                f"AND {body}", (cluster, job_id, start_time, kind)).rowcount)


_OPEN = ("SELECT r.job_id, r.start_time FROM runs r JOIN events e ON e.cluster = r.cluster "
         "AND e.job_id = r.job_id AND e.start_time = r.start_time AND e.kind = 'start' "
         "WHERE r.cluster = ? AND e.status != 'rejected'")
_OPEN_HOSTS = _OPEN.replace("SELECT r.job_id, r.start_time", "SELECT r.hosts")
_START_BODY = ("SELECT 1 FROM events s JOIN bodies b ON b.event_id = s.id WHERE s.cluster = ? "
               "AND s.job_id = ? AND s.start_time = ? AND s.kind = 'start'")



def dumps(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


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


def run_held_instead(store: Store, cluster: str, job_id: int, start_time: int
                     ) -> int | None:
    """Where cc-backend refused this run's start (queue.NOT_HELD): the start time of the
    run of its job id it holds instead, the latest one before it whose start this outbox
    delivered and cc-backend took; None where the start was not refused, or that run is
    not known here. The run's stop then goes into that run's metaData directly: a stop
    would be answered 404, and the start it would send first 422 again."""
    with store.read() as db:
        refused = db.execute(
            f"SELECT 1 FROM events WHERE cluster = ? AND job_id = ? AND start_time = ? "
            f"AND {NOT_HELD_ROWS}", (cluster, job_id, start_time)).fetchone()
        if refused is None:
            return None
        row = db.execute(
            "SELECT max(start_time) FROM events WHERE cluster = ? AND job_id = ? AND "
            f"kind = 'start' AND status = 'delivered' AND start_time < ? AND {HELD_ROWS}",
            (cluster, job_id, start_time)).fetchone()
    return row[0] if row and row[0] is not None else None


def latest_runs(store: Store, cluster: str, job_ids: Iterable[int]) -> dict[int, str]:
    """:meth:`Outbox.latest_run` of many jobs in one read (a part of the fast path's ends);
    jobs the outbox holds nothing of are left out."""
    latest: dict[int, tuple[int, str]] = {}
    with store.read() as db:
        for chunk in batches(sorted(set(job_ids))):
            for job_id, start, kind in db.execute(
                    f"SELECT job_id, start_time, kind FROM events WHERE cluster = ? AND "
                    f"job_id IN ({marks(chunk)}) AND kind IN ('start', 'stop')",
                    [cluster, *chunk]):
                if (start, kind) > latest.get(job_id, (-1, "")):  # "stop" > "start"
                    latest[job_id] = (start, kind)
    return {job_id: kind for job_id, (_, kind) in latest.items()}
