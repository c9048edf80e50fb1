"""Slurm records that could not be read, kept in the outbox's state until they can be.

A record that does not fit its parser (a Slurm release newer than the newest verified, a
field holding what no release wrote before), or that breaks every ``sacct --json`` answer
holding it (a corrupt slurmdbd row, :mod:`ccadapter.slurm.details`), is reported with the
Slurm version and the command and skipped, so that the rest of the answer is read. Its job id
is kept here, and slurm-window asks it again until it reads: the run is never dropped because
the window moved past it, and a ccadapter upgrade (or a repaired row) sends it. Kept in the
outbox's state (per cluster with ``slurmClusters``), so a restart forgets none.

What it costs is bounded per id and over time: an id is asked again after a delay that
doubles from a minute to :data:`MAX_DELAY` (an hour), so a record that never reads costs a
question an hour, not one a minute; a new one is said when it is first kept, and each is said
again at most once an hour (the log line names the ids and the latest error). At most
:data:`LIMIT` ids are kept: a release that changes a field of every record would otherwise
make the list, and the questions, grow with every job; beyond it the oldest are given up with
an error line that says how to send them once they read (``ccadapter backfill``).

``ccadapter unreadable list`` shows them, ``ccadapter unreadable forget`` gives them up: a
forgotten run is not sent unless ``ccadapter backfill`` reads it again (lastRun moved past
it already when it was kept, and is not moved back).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ccadapter.model import scoped_key, unscoped_key
from ccadapter.retry import RetryPolicy

log = logging.getLogger(__name__)

KEY = "slurm.unparsed"
LIMIT = 10_000
MAX_DELAY = 3600.0  # an unreadable record is asked at least this often
SAY_EVERY = 3600.0  # an id is said again at most this often
BACKOFF = RetryPolicy(60.0, MAX_DELAY)


def _delay(tries: int) -> float:
    """Without jitter: ids kept together are asked together, in one call."""
    return BACKOFF.delay(tries, rng=lambda: 1.0)


class StateStore(Protocol):
    def get_state(self, key: str) -> str | None: ...
    def set_state(self, key: str, value: str) -> None: ...
    def state_items(self, prefix: str) -> dict[str, str]: ...


class Unparsed:
    """One cluster's unreadable records: job id -> when it was first unreadable, how often
    it was asked again since, when it is due next and when it was last said."""

    def __init__(self, store: StateStore, cluster: str, scoped: bool,
                 clock: Callable[[], float] = time.time) -> None:
        """``scoped``: the state key carries the cluster's name (``slurmClusters``)."""
        self.store = store
        self.cluster = cluster
        self.key = scoped_key(KEY, cluster if scoped else None)
        self.clock = clock

    def ids(self) -> list[int]:
        return sorted(int(i) for i in self._load()["ids"])

    def due(self) -> list[int]:
        """The ids whose delay is over: to be asked again now."""
        now = self.clock()
        return sorted(int(i) for i, entry in self._load()["ids"].items()
                      if _entry(entry)["next"] <= now)

    def add(self, job_ids: Iterable[int], error: str) -> None:
        """Keep ``job_ids`` (those not kept already), ``error`` the latest failure; the new
        ones are said."""
        job_ids = list(job_ids)
        if not job_ids:
            return
        record = self._load()
        now = self.clock()
        new = [str(i) for i in dict.fromkeys(job_ids) if str(i) not in record["ids"]]
        for job_id in new:
            record["ids"][job_id] = {"first": now, "tries": 0, "next": now + _delay(1),
                                     "said": now}
        record.update(cluster=self.cluster, lastError=error, lastErrorAt=now)
        if new:
            log.error("%d Slurm record(s) cannot be read (jobs %s): kept and asked again, up "
                      "to every %.0f min (`ccadapter unreadable list`); the latest error: %s",
                      len(new), _some(new), MAX_DELAY / 60, error)
        self._cut(record)
        self.store.set_state(self.key, json.dumps(record))

    def settle(self, asked: Iterable[int], still: Iterable[int], error: str = ""
               ) -> list[int]:
        """``asked`` were asked again, ``still`` of them did not read: those wait longer
        (said again once an hour at most), the others are read at last (or slurmdbd no
        longer holds them) and leave the list; returns those."""
        record = self._load()
        now = self.clock()
        failing = {str(i) for i in still}
        done: list[int] = []
        again: list[str] = []
        for job_id in map(str, asked):
            if job_id not in record["ids"]:
                continue
            if job_id not in failing:
                del record["ids"][job_id]
                done.append(int(job_id))
                continue
            entry = _entry(record["ids"][job_id])
            entry["tries"] += 1
            entry["next"] = now + _delay(entry["tries"] + 1)
            if now - entry["said"] >= SAY_EVERY:
                entry["said"] = now
                again.append(job_id)
            record["ids"][job_id] = entry
        if error and failing:
            record.update(lastError=error, lastErrorAt=now)
        if again:
            log.error("%d Slurm record(s) still cannot be read (jobs %s), asked again up to "
                      "every %.0f min; `ccadapter unreadable forget` gives them up: %s",
                      len(again), _some(again), MAX_DELAY / 60, record.get("lastError"))
        self.store.set_state(self.key, json.dumps(record))
        return done

    def forget(self, job_ids: Iterable[int] | None = None) -> list[int]:
        """Give up these ids (None: every one); returns those given up."""
        record = self._load()
        gone = sorted(int(i) for i in record["ids"]) if job_ids is None else \
            sorted(i for i in set(job_ids) if str(i) in record["ids"])
        for job_id in gone:
            del record["ids"][str(job_id)]
        if gone:
            self.store.set_state(self.key, json.dumps(record))
        return gone

    def entries(self) -> list[dict[str, Any]]:
        """Each id with its times, for ``ccadapter unreadable list``."""
        return [{"jobId": int(i), **_entry(e)} for i, e in
                sorted(self._load()["ids"].items(), key=lambda kv: int(kv[0]))]

    def _cut(self, record: dict[str, Any]) -> None:
        ids = record["ids"]
        if len(ids) <= LIMIT:
            return
        oldest = sorted(ids, key=lambda i: _entry(ids[i])["first"])[:len(ids) - LIMIT]
        for job_id in oldest:
            del ids[job_id]
        log.error("%d unreadable Slurm record(s) given up (over %d kept), jobs %s: once "
                  "ccadapter reads them, send them with `ccadapter backfill`", len(oldest),
                  LIMIT, _some(oldest))

    def _load(self) -> dict[str, Any]:
        record = _record(self.store.get_state(self.key))
        return record or {"ids": {}, "lastError": None, "lastErrorAt": None}


def views(store: StateStore) -> dict[str | None, dict[str, Any]]:
    """Per state scope (None: the default mode's), what ``status`` and the metrics show: the
    cluster, how many records wait to be read, since when, and the latest failure."""
    out: dict[str | None, dict[str, Any]] = {}
    for key, raw in store.state_items("").items():
        cluster, name = unscoped_key(key)
        record = _record(raw) if name == KEY else None
        if record is None:
            continue
        times = [_entry(e)["first"] for e in record["ids"].values()]
        out[cluster] = {"cluster": record.get("cluster"), "count": len(times),
                        "since": min(times) if times else None,
                        "lastError": record.get("lastError"),
                        "lastErrorAt": record.get("lastErrorAt")}
    return out


def clusters(store: StateStore) -> dict[str | None, str | None]:
    """The state scopes that keep unreadable records, with their cluster's name."""
    return {scope: view["cluster"] for scope, view in views(store).items()}


def _entry(value: Any) -> dict[str, float]:
    """An id's entry; a bare time is the form before per-id delays (due at once)."""
    if isinstance(value, dict):
        return {"first": float(value.get("first", 0.0)), "tries": int(value.get("tries", 0)),
                "next": float(value.get("next", 0.0)), "said": float(value.get("said", 0.0))}
    return {"first": float(value), "tries": 0, "next": 0.0, "said": float(value)}


def _some(ids: list[str]) -> str:
    shown = ", ".join(ids[:10])
    return shown + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")


def _record(raw: str | None) -> dict[str, Any] | None:
    """The stored record; None when absent or not ours to read (a newer or broken
    version's)."""
    try:
        record = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("ids"), dict):
        return None
    return record
