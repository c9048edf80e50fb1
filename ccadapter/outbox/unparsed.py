"""Slurm records that could not be read, kept in the outbox's state until they can be.

A record that does not fit its parser (a Slurm release newer than the newest verified, a
field holding what no release wrote before) is reported with the Slurm version and the
command and skipped, so that the rest of the answer is read. Its job id is kept here, and
slurm-window asks it again at every cycle until it reads: the run is never dropped because
the window moved past it, and a ccadapter upgrade that reads it sends it. Kept in the outbox's
state (per cluster with ``slurmClusters``), so a restart forgets none.

At most :data:`LIMIT` ids are kept: a release that changes a field of every record would
otherwise make the list, and each cycle's questions, grow with every job; beyond it the
oldest are given up with an error line that says how to send them once they read
(``ccadapter backfill``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ccadapter.model import scoped_key, unscoped_key

log = logging.getLogger(__name__)

KEY = "slurm.unparsed"
LIMIT = 10_000


class StateStore(Protocol):
    def get_state(self, key: str) -> str | None: ...
    def set_state(self, key: str, value: str) -> None: ...
    def state_items(self, prefix: str) -> dict[str, str]: ...


class Unparsed:
    """One cluster's unreadable records: job id -> when it was first unreadable."""

    def __init__(self, store: StateStore, cluster: str, scoped: bool,
                 clock: Callable[[], float] = time.time) -> None:
        """``scoped``: the state key carries the cluster's name (``slurmClusters``)."""
        self.store = store
        self.cluster = cluster
        self.key = scoped_key(KEY, cluster if scoped else None)
        self.clock = clock

    def ids(self) -> list[int]:
        return sorted(int(i) for i in self._load()["ids"])

    def add(self, job_ids: Iterable[int], error: str) -> None:
        """Keep ``job_ids`` (those not kept already), ``error`` the latest failure."""
        job_ids = list(job_ids)
        if not job_ids:
            return
        record = self._load()
        now = self.clock()
        for job_id in job_ids:
            record["ids"].setdefault(str(job_id), now)
        record.update(cluster=self.cluster, lastError=error, lastErrorAt=now)
        if len(record["ids"]) > LIMIT:
            oldest = sorted(record["ids"], key=record["ids"].get)[:len(record["ids"]) - LIMIT]
            for job_id in oldest:
                del record["ids"][job_id]
            log.error("%d unreadable Slurm record(s) given up (over %d kept), jobs %s...: "
                      "once ccadapter reads them, send them with `ccadapter backfill`",
                      len(oldest), LIMIT, ", ".join(oldest[:5]))
        self.store.set_state(self.key, json.dumps(record))

    def settle(self, asked: Iterable[int], still: Iterable[int]) -> list[int]:
        """``asked`` were asked again, ``still`` of them did not read: the others are read
        at last (or slurmdbd no longer holds them) and leave the list; returns those."""
        record = self._load()
        failing = {str(i) for i in still}
        done = [int(i) for i in map(str, asked) if i in record["ids"] and i not in failing]
        if done:
            for job_id in done:
                del record["ids"][str(job_id)]
            self.store.set_state(self.key, json.dumps(record))
        return done

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
        times = list(record["ids"].values())
        out[cluster] = {"cluster": record.get("cluster"), "count": len(times),
                        "since": min(times) if times else None,
                        "lastError": record.get("lastError"),
                        "lastErrorAt": record.get("lastErrorAt")}
    return out


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
