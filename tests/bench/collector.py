"""Benchmark of the Slurm collector (issue: collector on real Slurm).

1. Time to turn a recorded 10,000-job sacct window into jobs, per Slurm version: the window is
   built from the real records in tests/fixtures/<version>/sacct-window.json (ids renumbered),
   replayed without subprocesses, so only our JSON decoding, parsing and joining is timed.
2. Slurm command invocations for a 100-job window on each real test-bed cluster (needs
   ``tests/testbed/slurm up``): a 100-task array is submitted and the collector's calls counted,
   with and without batch scripts.

Run: .venv/bin/python -m tests.bench.collector [--runs 5] [--no-live]
Prints a Markdown section for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from zoneinfo import ZoneInfo

from ccadapter.config import Config
from ccadapter.slurm.collector import Collector
from ccadapter.slurm.runner import SlurmRunner
from tests.conftest import VERSIONS, fixture_json
from tests.fakeslurm import RecordedSlurm


def synthetic_window(version: str, n: int) -> str:
    doc = fixture_json(version, "sacct-window.json")
    base = [r for r in doc["jobs"] if r.get("nodes") != "None assigned"]
    jobs = []
    for i in range(n):
        rec = copy.deepcopy(base[i % len(base)])
        rec["job_id"] = 100_000 + i
        jobs.append(rec)
    doc["jobs"] = jobs
    return json.dumps(doc)


def parse_times(version: str, n: int, runs: int) -> tuple[list[float], int]:
    """Seconds to collect a recorded ``n``-job window, per run; and the JSON's size."""
    text = synthetic_window(version, n)
    # clock far after the records: slurmctld would hold none of them, as for an old window
    runner = RecordedSlurm(version, text, clock=lambda: 4e9)
    config = Config(slurmFetchJobScripts=False)
    collector = Collector(runner, config, clock=lambda: 4e9, tz=ZoneInfo("UTC"))
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = collector.window(0)
        times.append(time.perf_counter() - started)
        assert len(result.jobs) == n and not result.errors
    return times, len(text)


def time_parse(version: str, n: int, runs: int) -> tuple[float, int]:
    times, size = parse_times(version, n, runs)
    return statistics.median(times), size


def live_calls(runs: int) -> list[tuple[str, dict, dict, int]]:
    from tests.integration.workload import testbed_clusters

    rows = []
    for cluster in testbed_clusters():
        since = time.time() - 2
        out = cluster.run("sbatch", "--parsable", "-o", "/dev/null", "--array=1-100",
                          "--wrap", "true")
        array_id = out.strip().split(";")[0]
        for _ in range(180):  # until slurmdbd has recorded the end of all 100 tasks
            out = cluster.run("sacct", "-X", "-n", "-P", "-o", "State", "-j", array_id)
            states = out.split()
            if len(states) == 100 and "RUNNING" not in states and "PENDING" not in states:
                break
            time.sleep(1)
        counts = {}
        for scripts in (False, True):
            config = Config(slurmCommandPrefix=list(cluster.prefix),
                            slurmFetchJobScripts=scripts)
            runner = SlurmRunner(config.slurm_command_prefix, config.slurm_command_timeout)
            result = Collector(runner, config).window(since)
            counts[scripts] = dict(runner.calls)
            n = sum(1 for j in result.jobs if j.array_job_id == int(array_id))
        rows.append((cluster.version, counts[False], counts[True], n))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-live", action="store_true")
    args = ap.parse_args()
    print("### Collector\n")
    print(f"Parse a recorded 10,000-job sacct window (median of {args.runs} runs):\n")
    print("| Slurm | sacct JSON | median time | jobs/s |")
    print("| --- | --- | --- | --- |")
    for version in VERSIONS:
        median, size = time_parse(version, 10_000, args.runs)
        print(f"| {version} | {size / 1e6:.1f} MB | {median:.2f} s | {10_000 / median:,.0f} |")
    if args.no_live:
        return
    print("\nSlurm invocations for a 100-job window (a 100-task array) on the real clusters:\n")
    print("| Slurm | jobs in window | calls without scripts | calls with batch scripts |")
    print("| --- | --- | --- | --- |")
    for version, plain, scripts, n in live_calls(args.runs):
        print(f"| {version} | {n} | {_fmt(plain)} | {_fmt(scripts)} |")


def _fmt(calls: dict) -> str:
    detail = ", ".join(f"{k} {v}" for k, v in sorted(calls.items()))
    return f"{sum(calls.values())} ({detail})"


if __name__ == "__main__":
    main()
