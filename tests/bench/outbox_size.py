"""Benchmark: the outbox file over a month of a site's jobs (issue 35, item 11).

The outbox keeps every event of the last ``slurmQueryMaxSpan`` (7 days) as a small row, a
run's start body while it runs and an hour after its stop, and gives freed pages back to the
file system (:meth:`ccadapter.outbox.Outbox.compact`, hourly in the daemon). This drives the
real Outbox on a simulated clock through ``days`` days at ``per_day`` jobs a day: each hour
the hour's starts are enqueued and delivered, the stops of the jobs that started an hour
before likewise, the node state of the cluster once a minute, and compaction runs; the file's
size is read after a WAL checkpoint at the end of each day. Bodies are the real start bodies
of the recorded 24.11 workload (tests/fixtures), each with a batch script of ``script`` bytes
(a site's scripts are kilobytes; the test bed's are a line). No Slurm, no cc-backend: the
file is what is measured.

Run: .venv/bin/python -m tests.bench.outbox_size [--days 30] [--per-day 50000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ccadapter.outbox import DeliveryStatus, NewEvent, Outbox, Result
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.slurm.collector import Collector
from tests.bench import results
from tests.conftest import collector_settings, fixture_json, fixture_text
from tests.fakeslurm import RecordedSlurm

KEEP = 7 * 86400  # slurmQueryMaxSpan's default


def bodies(script: int) -> list[dict]:
    """The start bodies of the recorded 24.11 workload, each with a script of that size."""
    meta = fixture_json("24.11", "testbed/workload.json")
    slurm = RecordedSlurm("24.11", fixture_json("24.11", "testbed/sacct-window.json"),
                          fixture_text("24.11", "testbed/scontrol-d-final.txt"))
    jobs = Collector(slurm, collector_settings(slurmFetchJobScripts=False),
                     clock=lambda: meta["since"] + 300).window(meta["since"] - 60).jobs
    out = []
    for job in jobs:
        for ev in events_for(job):
            if ev.kind == "start":
                meta_data = {**ev.payload.get("metaData", {}), "jobScript": "#" * script}
                out.append({**ev.payload, "metaData": meta_data})
    return out


def deliver(box: Outbox) -> None:
    while due := box.queue.due(4096):
        box.queue.record(Result(e.id, DeliveryStatus.DELIVERED) for e in due)


def simulate(days: int, per_day: int, script: int, directory: Path) -> list[dict]:
    now = 1_800_000_000.0
    box = Outbox(directory / "outbox.sqlite", clock=lambda: now)
    templates = bodies(script)
    per_hour = per_day // 24
    job = 0
    running: list[tuple[int, int, dict]] = []
    out = []
    for day in range(1, days + 1):
        for _ in range(24):
            starts = []
            for _ in range(per_hour):
                job += 1
                body = {**templates[job % len(templates)], "jobId": job,
                        "startTime": int(now)}
                starts.append((job, int(now), body))
            box.enqueue(NewEvent("c", j, t, "start", b, True) for j, t, b in starts)
            deliver(box)
            box.enqueue(NewEvent("c", j, t, "stop", {"stop": {
                "jobId": j, "cluster": "c", "startTime": t, "stopTime": t + 3500,
                "jobState": "completed"}, "start": b}) for j, t, b in running)
            deliver(box)
            running = starts
            for minute in range(60):
                box.enqueue([NewEvent("c", 0, int(now) + 60 * minute, "nodestate",
                                      {"cluster": "c", "nodes": []})])
            deliver(box)
            now += 3600
            box.compact(KEEP)
        box.store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = box.path.stat().st_size / 1e6
        with box.store.read() as db:
            rows = db.execute("SELECT count(*) FROM events").fetchone()[0]
        out.append({"day": day, "outbox_mb": round(size, 2), "events": rows})
        print(f"day {day}: {size:.1f} MB, {rows:,} events", flush=True)
    box.close()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--per-day", type=int, default=50_000)
    parser.add_argument("--script", type=int, default=2000)
    args = parser.parse_args(argv)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="outbox-size-") as tmp:
        days = simulate(args.days, args.per_day, args.script, Path(tmp))
    results.write("outbox-size", command=results.command_line("tests.bench.outbox_size"),
                  receiver="none", plan={"days": args.days, "per_day": args.per_day,
                                         "script_bytes": args.script, "keep_s": KEEP},
                  data={"days": days}, took_s=time.monotonic() - began)


if __name__ == "__main__":
    main()
