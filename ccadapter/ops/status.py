"""What ``ccadapter status`` shows, gathered from files alone: the outbox (SQLite in WAL
mode, which lets a reader in while the daemon writes), the PID file and lock, and lastRun.

It never takes the daemon's lock, never calls Slurm or cc-backend and never creates a file,
so it answers the same whether the daemon runs, is stopped, or crashed. The daemon leaves
each routine's last cycle in the outbox's state table (:class:`CycleLog`) for it to read.
Secret values of the config are scrubbed from everything it returns, whatever the source.

With ``slurmClusters`` each cluster's routines, lastRun and whether the daemon serves it now
are shown per cluster (``clusters``); the clusters are those the config names, those the
daemon last listed (``["*"]``) and those with a recorded cycle (a cluster no longer listed
keeps its last cycles, ``"served": false``).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ccadapter import __version__
from ccadapter.config.keys import Config
from ccadapter.config.secrets import scrub
from ccadapter.daemon.app import HOOK_KEY, SERVED_KEY
from ccadapter.daemon.control import STATE_KEY as CONTROL_KEY
from ccadapter.daemon.loop import Routine
from ccadapter.errors import OutboxError
from ccadapter.model import ALL_CLUSTERS, last_run_path, scoped_key, unscoped_key
from ccadapter.numbering.renumber import STATE_KEY as NUMBERING_KEY
from ccadapter.numbering.renumber import said_view
from ccadapter.outbox import Outbox, admin, unparsed
from ccadapter.runtime.lastrun import LastRun
from ccadapter.runtime.pidlock import PidLock, pid_alive

log = logging.getLogger(__name__)

CYCLE_PREFIX = "cycle."


class CycleLog:
    """The daemon's ``on_cycle``: each routine's last cycle, kept on disk for ``status``.

    A failing write is logged and otherwise ignored: a full disk must not stop the loop
    whose work (the outbox) matters more than this record of it."""

    def __init__(self, outbox: Outbox, clock: Callable[[], float] = time.time,
                 then: Callable[[Routine], None] | None = None) -> None:
        self.outbox = outbox
        self.clock = clock
        self.then = then

    def __call__(self, routine: Routine) -> None:
        record = {"at": self.clock(), "ok": routine.last_error is None,
                  "lastOk": routine.last_ok, "error": routine.last_error}
        key = CYCLE_PREFIX + scoped_key(routine.name, routine.cluster)
        try:
            self.outbox.store.set_state(key, json.dumps(record))
        except (sqlite3.Error, OutboxError) as exc:
            log.warning("cannot record the cycle of %s for `status`: %s", routine.label, exc)
        if self.then:
            self.then(routine)


def collect(config: Config, outbox_file: Path, clock: Callable[[], float] = time.time,
            rejected_limit: int = 50) -> dict[str, Any]:
    """The whole status document (the README shows its shape; ARCHITECTURE.md gives each
    field)."""
    now = clock()
    doc = {
        "version": __version__,
        "time": now,
        "daemon": daemon_view(config),
        "lastRun": _last_run_view(config.last_run_path, now),
        **_outbox_views(outbox_file, now, rejected_limit),
    }
    cycles, served = doc.pop("cycles"), doc.pop("served")
    records = doc.pop("unparsed")
    doc["unparsedRecords"] = records.pop(None, None)
    hook = doc.pop("hook")
    doc["hook"] = None if hook is None else {**hook, "age": _age(now, hook.get("at", now))}
    doc["reconcilers"] = cycles.pop(None, {})
    if config.multi_cluster():
        doc["clusters"] = _cluster_views(config, cycles, served, now)
        for name, view in doc["clusters"].items():
            view["unparsedRecords"] = records.get(name)
    return scrub(doc, config.secret_values())


def daemon_view(config: Config) -> dict[str, Any]:
    """The PID file, whether that process lives, and who holds the lock according to the
    kernel (``/proc/locks``; ``null`` where there is none). An alive PID that does not hold
    the lock is not our daemon: a reused PID, or cc-slurm-adapter (same default path)."""
    lock = PidLock(config.pid_file_path)
    pid = lock.holder()
    owners = lock.lock_owners()
    return {"pidFile": config.pid_file_path, "pid": pid,
            "alive": pid is not None and pid_alive(pid),
            "lockHeld": None if owners is None else bool(owners), "lockPids": owners}


def _age(now: float, then: float) -> float:
    """Seconds from ``then`` to the document's time. The daemon keeps writing while
    ``status`` reads; a record written after the document's time is 0 s old, not negative."""
    return max(0.0, round(now - then, 3))


def _last_run_view(path: str | Path, now: float, seed: str | None = None) -> dict[str, Any]:
    ts = LastRun(path, seed).get()
    return {"path": str(path), "time": ts, "age": None if ts is None else _age(now, ts)}


def _cluster_views(config: Config, cycles: dict[str | None, dict[str, Any]],
                   served: list[str] | None, now: float) -> dict[str, dict[str, Any]]:
    """Per cluster: served now (None: the daemon has not said yet), its lastRun (read from
    ``lastRunPath`` until its own file exists), its routines' last cycles."""
    named = [c for c in config.slurm_clusters if c != ALL_CLUSTERS]
    names = dict.fromkeys([*named, *(served or []), *(c for c in cycles if c is not None)])
    out = {}
    for name in names:
        path = last_run_path(config.last_run_path, name)
        out[name] = {"served": None if served is None else name in served,
                     "lastRun": _last_run_view(path, now, seed=config.last_run_path),
                     "reconcilers": cycles.get(name, {})}
    return out


def _outbox_views(path: Path, now: float, rejected_limit: int) -> dict[str, Any]:
    """``outbox``, the cycles by cluster (``cycles``), the served clusters (``served``) and
    the failover role (``control``); an outbox that does not exist yet is not created."""
    view: dict[str, Any] = {"path": str(path), "exists": path.exists(), "pending": 0,
                            "rejected": 0, "notHeld": 0, "oldestPendingAge": None,
                            "counts": {}, "rejectedEvents": []}
    if not view["exists"]:
        return {"outbox": view, "cycles": {}, "served": None, "control": None, "hook": None,
                "unparsed": {}, "resourceNumbering": []}
    outbox = Outbox.reader(path, clock=lambda: now)
    try:
        stats = admin.stats(outbox.store)
        view.update(pending=stats["pending"], rejected=stats["rejected"],
                    notHeld=stats["not_held"],
                    counts=_nested(stats["counts"]),
                    rejectedEvents=admin.rejected(outbox.store, rejected_limit))
        if stats["pending"]:
            view["oldestPendingAge"] = round(stats["oldest_pending_age"], 3)
        cycles = outbox.store.state_items(CYCLE_PREFIX)
        served = outbox.store.get_state(SERVED_KEY)
        control = outbox.store.get_state(CONTROL_KEY)
        hook = outbox.store.get_state(HOOK_KEY)
        numbering = said_view(outbox.store.get_state(NUMBERING_KEY))
        records = unparsed.views(outbox.store)
    finally:
        outbox.close()
    return {"outbox": view, "cycles": _cycles(cycles, now), "served": _names(served),
            "control": _control(control, now), "hook": _record(hook), "unparsed": records,
            "resourceNumbering": numbering}


def _names(raw: str | None) -> list[str] | None:
    try:
        names = json.loads(raw) if raw is not None else None
    except ValueError:
        return None  # written by a newer or broken version: not ours to interpret
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else None


def _record(raw: str | None) -> dict[str, Any] | None:
    """A JSON object the daemon recorded; None when absent or not ours to interpret
    (written by a newer or broken version)."""
    try:
        record = json.loads(raw) if raw else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _control(raw: str | None, now: float) -> dict[str, Any] | None:
    """The failover role the daemon recorded last (``null``: no slurmctldFailover)."""
    record = _record(raw)
    if record is None:
        return None
    record["age"] = _age(now, record["checkedAt"]) if record.get("checkedAt") else None
    return record


def _nested(counts: dict[str, int]) -> dict[str, dict[str, int]]:
    """``{"start:pending": 3}`` -> ``{"start": {"pending": 3}}``."""
    out: dict[str, dict[str, int]] = {}
    for key, n in sorted(counts.items()):
        kind, _, status = key.partition(":")
        out.setdefault(kind, {})[status] = n
    return out


def _cycles(raw: dict[str, str], now: float) -> dict[str | None, dict[str, Any]]:
    """cluster (None: the default mode's, and routines of no cluster) -> routine -> cycle."""
    out: dict[str | None, dict[str, Any]] = {}
    for key, value in raw.items():
        try:
            record = json.loads(value)
        except ValueError:
            continue  # written by a newer or broken version: not ours to interpret
        record["age"] = _age(now, record["at"])
        cluster, name = unscoped_key(key.removeprefix(CYCLE_PREFIX))
        out.setdefault(cluster, {})[name] = record
    return out
