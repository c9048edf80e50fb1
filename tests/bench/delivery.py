"""Benchmark of the sync engine (issue 3).

1. Events/s delivered from a 10,000-event backlog (5,000 runs: start + stop, bodies built
   from real recorded jobs) to the cc-backend stand-in answering after 5 ms, run in its own
   process; the delivery runs in a child process whose RSS is read after the drain.
2. Steady RSS of `ccadapter daemon` idling on each test-bed cluster (60 s poll would take
   minutes; the poll is 2 s so that several cycles are seen).
3. Slurm invocations per cycle per cluster (slurm-window, stale-jobs, nodestate).

Run: .venv/bin/python -m tests.bench.delivery [--runs 5] [--events 10000] [--no-live]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from zoneinfo import ZoneInfo

from ccadapter.config import Config
from ccadapter.reconcilers.events import events_for

BENCH_CLUSTER = "cluster24"


def real_jobs():
    """Started jobs of the 24.11 test-bed recording, with allocations (busy snapshot)."""
    from ccadapter.slurm.collector import Collector
    from tests.conftest import FIXTURES, ReplayRunner

    base = FIXTURES / "24.11" / "testbed"
    window = (base / "sacct-window.json").read_text()
    busy = (base / "scontrol-d-busy.txt").read_text()
    meta = json.loads((base / "workload.json").read_text())

    def answer(argv):
        return busy if argv[0] == "scontrol" else window

    config = Config(slurmFetchJobScripts=False)
    collector = Collector(ReplayRunner(answer), config, clock=lambda: meta["since"] + 60,
                          tz=ZoneInfo("UTC"))
    return [j for j in collector.window(meta["since"]).jobs if j.started and j.finished]


def fill_outbox(path: Path, n_events: int) -> None:
    from dataclasses import replace

    from ccadapter.outbox import Outbox

    jobs = real_jobs()
    box = Outbox(path)
    events = []
    for i in range(n_events // 2):
        job = replace(jobs[i % len(jobs)], job_id=1_000_000 + i)
        events.extend(events_for(job))
    box.enqueue(events)
    box.close()


def child(outbox: str, url: str, workers: int) -> None:
    """Drain the outbox; print events/s and RSS as JSON."""
    from ccadapter.cc.client import CcClient
    from ccadapter.delivery import Deliverer, RestDelivery
    from ccadapter.outbox import Outbox

    box = Outbox(outbox)
    client = CcClient(url, "bench-token")
    deliverer = Deliverer(box, RestDelivery(client), workers=workers)
    started = time.perf_counter()
    total = 0
    while True:
        stats = deliverer.run_once()
        total += stats.delivered
        if not box.due(1):
            break
    elapsed = time.perf_counter() - started
    rss = int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) // 1024
    print(json.dumps({"events": total, "seconds": elapsed, "rss_mb": rss,
                      "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                      "pending": box.stats()["pending"], "rejected": box.stats()["rejected"]}))
    deliverer.close()
    client.close()
    box.close()


def standin_process(latency: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.standin.ccbackend", "--port", "0", "--token",
         "bench-token", "--cluster", BENCH_CLUSTER, "--latency", str(latency), "--quiet"],
        stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    line = proc.stdout.readline().strip()
    return proc, line.rsplit(" ", 1)[1]


def throughput(runs: int, n_events: int, workers: int) -> list[dict]:
    results = []
    for _ in range(runs):
        server, url = standin_process(0.005)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "outbox.sqlite"
            fill_outbox(path, n_events)
            out = subprocess.run([sys.executable, "-m", "tests.bench.delivery", "--child",
                                  str(path), url, str(workers)], capture_output=True,
                                 text=True, check=True, timeout=900)
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        results.append(json.loads(out.stdout))
    return results


def live(runs: int) -> list[dict]:
    """Per cluster: Slurm calls of one idle cycle, and the daemon's steady RSS."""
    from ccadapter.app import build
    from tests.integration.workload import testbed_clusters
    from tests.standin.ccbackend import CcBackendStandin

    rows = []
    for cluster in testbed_clusters():
        with tempfile.TemporaryDirectory() as tmp, CcBackendStandin(
                "t", clusters=[cluster.name]) as standin:
            cfg = {"ccRestUrl": standin.url, "ccRestJwt": "t",
                   "pidFilePath": f"{tmp}/daemon.pid", "lastRunPath": f"{tmp}/lastrun",
                   "stateDirectory": f"{tmp}/state", "slurmCommandPrefix": list(cluster.prefix),
                   "slurmPollInterval": 2}
            config = Config.model_validate(cfg)
            app = build(config)
            calls = []
            for _ in range(runs):  # cycles after the first (the first one looks back)
                for name in ("slurm-window", "stale-jobs", "nodestate"):
                    app.reconcilers[name].run_once()
                time.sleep(1.0)  # cycles are >= 1 s apart: no squeue answer is reused
                before = dict(app.collector.runner.calls)
                for name in ("slurm-window", "stale-jobs", "nodestate"):
                    app.reconcilers[name].run_once()
                calls.append({k: v - before.get(k, 0)
                              for k, v in app.collector.runner.calls.items()})
            app.close()
            Path(f"{tmp}/config.json").write_text(json.dumps(cfg))
            daemon = subprocess.Popen([sys.executable, "-m", "ccadapter", "daemon", "--config",
                                       f"{tmp}/config.json", "--log-level", "warning"],
                                      stdin=subprocess.DEVNULL)
            rss = []
            for _ in range(runs):
                time.sleep(4)
                status = Path(f"/proc/{daemon.pid}/status").read_text()
                rss.append(int(status.split("VmRSS:")[1].split()[0]) / 1024)
            daemon.send_signal(signal.SIGTERM)
            code = daemon.wait(60)
        totals = sorted(sum(c.values()) for c in calls)
        rows.append({"version": cluster.version, "calls": calls[len(calls) // 2],
                     "calls_median": statistics.median(totals), "calls_max": totals[-1],
                     "rss_mb": statistics.median(rss), "exit": code})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=3, metavar=("OUTBOX", "URL", "WORKERS"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--no-live", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    res = throughput(args.runs, args.events, args.workers)
    rates = [r["events"] / r["seconds"] for r in res]
    print("### Sync engine\n")
    print(f"Delivery of a {args.events:,}-event backlog to the stand-in at 5 ms latency, "
          f"{args.workers} workers (median of {args.runs} runs; target >= 1,000 events/s, "
          "RSS <= 80 MB):\n")
    print("| run | events | seconds | events/s | RSS after | max RSS |")
    print("| --- | --- | --- | --- | --- | --- |")
    for i, (r, rate) in enumerate(zip(res, rates, strict=True), 1):
        print(f"| {i} | {r['events']} | {r['seconds']:.2f} | {rate:,.0f} | {r['rss_mb']} MB | "
              f"{r['maxrss_mb']} MB |")
    print(f"| **median** | | | **{statistics.median(rates):,.0f}** | "
          f"**{statistics.median(r['rss_mb'] for r in res)} MB** | "
          f"{statistics.median(r['maxrss_mb'] for r in res)} MB |")
    if args.no_live:
        return
    print("\nIdle cycle on each real cluster (slurm-window + stale-jobs + nodestate; target "
          "<= 5 Slurm calls per cycle, steady RSS <= 50 MB):\n")
    print("| Slurm | calls per cycle (median) | max | one cycle by command | daemon steady RSS "
          "(median) |")
    print("| --- | --- | --- | --- | --- |")
    for row in live(args.runs):
        detail = ", ".join(f"{k} {v}" for k, v in sorted(row["calls"].items()))
        print(f"| {row['version']} | {row['calls_median']:g} | {row['calls_max']} | {detail} | "
              f"{row['rss_mb']:.1f} MB |")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
