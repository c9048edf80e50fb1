"""The ceiling of the real cc-backend for the pipeline benchmark (issue 30): how many job
events per second cc-backend 1.5.4 takes from a client that does nothing else.

The minimal client posts, for each job, its start_job and then its stop_job body, in a tight
loop over keep-alive connections (``http.client``, one per thread), from as many threads as
helps: :func:`ceiling` tries :data:`THREADS` on a sample of the jobs, each on a fresh server
(tests.bench.receivers.RealCcBackend: the daemon's kind, with the same commit interval),
and measures all the jobs with the best, on a fresh server again. The bodies are the ones
ccadapter sent in the same run (read from its outbox: :func:`bodies_of`), so both pay the
same work in cc-backend (its job cache, the duplicate check, archiving at each stop).
Every answer must be 201 (start) or 200 (stop) and the server must hold every job
afterwards, or the run fails.
"""

from __future__ import annotations

import http.client
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.bench.receivers import RealCcBackend
from tests.ccbackend import START, STOP, Nodes

THREADS = (1, 2, 4, 8)
SAMPLE_JOBS = 2_000  # jobs per trial of a thread count

Bodies = list[tuple[bytes, bytes]]  # per job: its start_job and its stop_job body, encoded


def bodies_of(outbox: Path) -> Bodies:
    """The start and stop bodies ccadapter delivered, per job in job-id order, from its
    outbox (a stop's payload holds the stop body under ``stop``)."""
    db = sqlite3.connect(f"file:{outbox}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT s.payload, t.payload FROM events s JOIN events t ON "
                          "t.cluster = s.cluster AND t.job_id = s.job_id AND t.start_time = "
                          "s.start_time AND t.kind = 'stop' WHERE s.kind = 'start' "
                          "ORDER BY s.job_id").fetchall()
    finally:
        db.close()
    return [(_encode(json.loads(start)), _encode(json.loads(stop)["stop"]))
            for start, stop in rows]


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def post_all(url: str, token: str, bodies: Bodies, threads: int) -> dict[str, Any]:
    """Start then stop each job, ``threads`` loops at once, each over one kept-alive
    connection taking the next job; returns the figures, raises on any other answer."""
    host, port = url.removeprefix("http://").split(":")
    jobs = iter(bodies)
    lock = threading.Lock()
    failures: list[str] = []
    headers = {"X-Auth-Token": token, "Content-Type": "application/json",
               "Accept": "application/json"}

    def take() -> Iterator[tuple[bytes, bytes]]:
        while True:
            with lock:
                job = next(jobs, None)
            if job is None or failures:
                return
            yield job

    def loop() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            for start, stop in take():
                for path, body, ok in ((START, start, 201), (STOP, stop, 200)):
                    conn.request("POST", path, body, headers)
                    resp = conn.getresponse()
                    text = resp.read()
                    if resp.status != ok:
                        failures.append(f"{path} {resp.status} {text[:200]!r}")
                        return
        except OSError as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()

    workers = [threading.Thread(target=loop, name=f"ceiling-{i}") for i in range(threads)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = time.monotonic() - started
    if failures:
        raise RuntimeError(f"the ceiling client got {failures[0]}")
    return {"jobs": len(bodies), "events": 2 * len(bodies), "threads": threads,
            "seconds": seconds, "events_per_s": 2 * len(bodies) / seconds}


def measured(bodies: Bodies, threads: int, cluster: str, nodes: Nodes) -> dict[str, Any]:
    """One run of the minimal client on a fresh server, checked: every job held
    (tests.bench.receivers.RealCcBackend.check)."""
    server = RealCcBackend(cluster, nodes)
    try:
        server.start()
        row = post_all(server.url, server.token, bodies, threads)
        row["held"] = server.check(len(bodies))
    finally:
        server.stop()
    return row


def ceiling(bodies: Bodies, cluster: str, nodes: Nodes) -> dict[str, Any]:
    """The thread count that does best on SAMPLE_JOBS of the jobs, then all of them with it."""
    sample = bodies[:SAMPLE_JOBS]
    trials = [measured(sample, n, cluster, nodes) for n in THREADS]
    best = max(trials, key=lambda t: t["events_per_s"])["threads"]
    return {**measured(bodies, best, cluster, nodes), "trials": trials}
