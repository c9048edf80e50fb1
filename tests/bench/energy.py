"""Benchmark: what reading consumed energy costs a poll (issue 14, item 5).

Energy comes with the job record ``sacct --json -X`` already reads: the runs the window reads
anyway cost nothing more. What costs is a run whose stop came from the hook's fast path
(slurmctld cannot see energy): on a cluster that gathers energy, the window reads it again
while it ended less than ``ENERGY_WAIT`` ago, until its energy is stored. This measures a
window over ``n`` such runs (real recorded 24.11 records, ids renumbered, energy constructed
as in tests/energy.py), replayed without subprocesses: Slurm calls and seconds per cycle,
with energy gathering off, with energy in every record (read once), and with energy in none
(read on every cycle until ENERGY_WAIT passes: the worst case).

Run: .venv/bin/python -m tests.bench.energy [--jobs 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from zoneinfo import ZoneInfo

from ccadapter.outbox import DeliveryStatus, Outbox, Result
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.reconcilers.slurm_window import SlurmWindow, WindowSettings
from ccadapter.runtime.lastrun import LastRun
from ccadapter.slurm.collector import Collector
from tests.conftest import collector_settings, fixture_json
from tests.energy import with_energy
from tests.fakeslurm import RecordedSlurm

UTC = ZoneInfo("UTC")


def window_doc(n: int, joules: int | None) -> tuple[dict, float]:
    """``n`` ended runs built from the recorded 24.11 ones; (document, the last end)."""
    doc = fixture_json("24.11", "testbed/sacct-window.json")
    base = [r for r in doc["jobs"] if r.get("nodes") != "None assigned"
            and r["time"]["end"] and r["state"]["current"][0] != "RUNNING"]
    jobs = []
    for i in range(n):
        rec = copy.deepcopy(base[i % len(base)])
        rec["job_id"] = 100_000 + i
        rec["array"]["job_id"] = 0
        rec["array"]["task_id"] = {"set": False, "infinite": False, "number": 0}
        jobs.append(rec)
    doc["jobs"] = jobs
    if joules is not None:
        doc = with_energy(doc, {r["job_id"]: joules for r in jobs})
    return doc, max(r["time"]["end"] for r in jobs)


def cycles(n: int, joules: int | None, energy: bool, count: int) -> list[tuple[int, float]]:
    """(Slurm calls, seconds) of ``count`` window cycles over ``n`` runs stopped by the
    fast path."""
    doc, last_end = window_doc(n, joules)
    now = last_end + 30
    slurm = RecordedSlurm("24.11", doc, clock=lambda: now)
    collector = Collector(slurm, collector_settings(slurmFetchJobScripts=False, ccRestUrl="http://cc"),
                          clock=lambda: now, tz=UTC)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        box = Outbox(Path(tmp) / "o.sqlite", clock=lambda: now)
        jobs = [j for r in collector.iter_jobs([r["job_id"] for r in doc["jobs"]], starts=())
                for j in r.jobs]
        box.enqueue([ev for j in jobs for ev in events_for(replace(j, energy=None))])
        while due := box.queue.due(1000):  # delivered, as the fast path's are within a second
            box.queue.record(Result(e.id, DeliveryStatus.DELIVERED) for e in due)
        last = LastRun(Path(tmp) / "lastrun")
        settings = WindowSettings("cluster24", energy=energy)
        since = min(r["time"]["start"] for r in doc["jobs"]) - 10
        for _ in range(count):
            last.set(since)
            calls = sum(slurm.calls.values())
            started = time.perf_counter()
            SlurmWindow(collector, box, last, settings, lambda: now).run_once()
            out.append((sum(slurm.calls.values()) - calls, time.perf_counter() - started))
        box.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"window of {args.jobs:,} ended runs stopped by the fast path, 3 cycles; median of "
          f"{args.runs} runs (Slurm calls and seconds per cycle)\n")
    print("| case | cycle 1 | cycle 2 | cycle 3 |\n| --- | --- | --- | --- |")
    for name, joules, energy in (("energy not gathered", None, False),
                                 ("energy in every record", 51234, True),
                                 ("energy gathered, in no record", None, True)):
        runs = [cycles(args.jobs, joules, energy, 3) for _ in range(args.runs)]
        cells = []
        for i in range(3):
            calls = statistics.median(r[i][0] for r in runs)
            secs = statistics.median(r[i][1] for r in runs)
            cells.append(f"{calls:.0f} calls, {secs:.2f} s")
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
