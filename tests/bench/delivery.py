"""Benchmark of the sync engine (issue 3).

1. Events/s delivered from a backlog of start+stop events (bodies built from real recorded
   jobs; 1 job = start + stop) to the cc-backend stand-in answering after 5 ms, run in its own
   process; the delivery runs in a child process whose RSS is read after the drain. The backlog
   is written once and copied for every run.
2. Steady RSS of `ccadapter daemon` idling on each test-bed cluster (60 s poll would take
   minutes; the poll is 2 s so that several cycles are seen).
3. Slurm invocations per cycle per cluster (slurm-window, stale-jobs, nodestate), idle and busy
   (a short array running and ending inside the window).
4. CPU used by `ccadapter daemon` idling with the default 60 s poll (``idle_cpu``; used by
   tests.bench.all).

Run: .venv/bin/python -m tests.bench.delivery [--runs 5] [--events 10000] [--no-live]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from zoneinfo import ZoneInfo

from ccadapter.config import Config
from ccadapter.lastrun import LastRun
from ccadapter.reconcilers.events import events_for

BENCH_CLUSTER = "cluster24"


def real_jobs():
    """Started jobs of the 24.11 test-bed recording, with allocations (busy snapshot)."""
    from ccadapter.slurm.collector import Collector
    from tests.conftest import FIXTURES
    from tests.fakeslurm import RecordedSlurm

    base = FIXTURES / "24.11" / "testbed"
    window = (base / "sacct-window.json").read_text()
    busy = (base / "scontrol-d-busy.txt").read_text()
    meta = json.loads((base / "workload.json").read_text())
    clock = lambda: meta["since"] + 60  # noqa: E731
    config = Config(slurmFetchJobScripts=False)
    collector = Collector(RecordedSlurm("24.11", window, busy, clock=clock), config,
                          clock=clock, tz=ZoneInfo("UTC"))
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
    status = Path("/proc/self/status").read_text()
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the parent, which may
    # have been bigger (it built the backlog)
    print(json.dumps({"events": total, "seconds": elapsed,
                      "rss_mb": int(status.split("VmRSS:")[1].split()[0]) // 1024,
                      "maxrss_mb": int(status.split("VmHWM:")[1].split()[0]) // 1024,
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
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "backlog.sqlite"
        fill_outbox(template, n_events)  # once: 100k jobs take longer to build than to copy
        for _ in range(runs):
            path = Path(tmp) / "outbox.sqlite"
            shutil.copyfile(template, path)
            server, url = standin_process(0.005)
            try:
                out = subprocess.run([sys.executable, "-m", "tests.bench.delivery", "--child",
                                      str(path), url, str(workers)], capture_output=True,
                                     text=True, check=True, timeout=1800)
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(30)
            path.unlink()
            results.append(json.loads(out.stdout))
    return results


def _app_config(cluster, standin, tmp: str, **extra) -> dict:
    return {"ccRestUrl": standin.url, "ccRestJwt": "t",
            "pidFilePath": f"{tmp}/daemon.pid", "lastRunPath": f"{tmp}/lastrun",
            "prepSockListenPath": f"{tmp}/daemon.sock",
            "stateDirectory": f"{tmp}/state", "slurmCommandPrefix": list(cluster.prefix),
            **extra}


def _cycle(app) -> dict:
    """Slurm calls of one poll cycle (what the daemon runs every slurmPollInterval), by
    command, and how many jobs its window held."""
    before = dict(app.collector.runner.calls)
    window = app.reconcilers["slurm-window"].run_once()
    for name in ("stale-jobs", "nodestate"):
        app.reconcilers[name].run_once()
    calls = {k: v - before.get(k, 0) for k, v in app.collector.runner.calls.items()
             if v - before.get(k, 0)}
    return {"calls": calls, "jobs": window.get("jobs", 0)}


def idle_cycle_calls(cluster, runs: int, quiet_wait: float = 130) -> list[dict]:
    """``runs`` idle cycles, 1 s apart (no squeue answer is reused), once a cycle's window
    (which re-reads slurmWindowOverlap, 120 s) holds no job or ``quiet_wait`` has passed;
    each cycle says how many jobs its window held."""
    from ccadapter.app import build
    from tests.standin.ccbackend import CcBackendStandin

    with tempfile.TemporaryDirectory() as tmp, CcBackendStandin(
            "t", clusters=[cluster.name]) as standin:
        app = build(Config.model_validate(_app_config(cluster, standin, tmp)))
        _cycle(app)  # the first one looks back
        until = time.time() + quiet_wait
        while _cycle(app)["jobs"] and time.time() < until:
            time.sleep(5)
        cycles = []
        for _ in range(runs):
            time.sleep(1.0)
            cycles.append(_cycle(app))
        app.close()
    return cycles


def _array_states(cluster, array_id: str) -> list[str]:
    out = cluster.run("sacct", "-X", "-n", "-P", "-o", "State", "-j", array_id)
    return [s.split()[0] for s in out.split("\n") if s.strip()]


def busy_cycle_calls(cluster, runs: int, tasks: int = 10) -> list[dict[str, dict]]:
    """Slurm calls of a cycle whose window holds a ``tasks``-task array, part ended and part
    running; with batch scripts (the default, "scripts") and without ("no_scripts"), over the
    same window. Each as ``_cycle`` returns it."""
    from ccadapter.app import build
    from tests.integration.workload import TERMINAL
    from tests.standin.ccbackend import CcBackendStandin

    rows = []
    for _ in range(runs):
        since = time.time() - 1
        out = cluster.run("sbatch", "--parsable", "-o", "/dev/null", f"--array=1-{tasks}",
                          "--wrap", "sleep 2")
        array_id = out.strip().split(";")[0]
        for _ in range(120):  # until some tasks have ended (the others run or wait)
            if sum(s in TERMINAL for s in _array_states(cluster, array_id)) >= 1:
                break
            time.sleep(0.5)
        row = {}
        for scripts in (True, False):
            with tempfile.TemporaryDirectory() as tmp, CcBackendStandin(
                    "t", clusters=[cluster.name]) as standin:
                cfg = _app_config(cluster, standin, tmp, slurmFetchJobScripts=scripts)
                LastRun(cfg["lastRunPath"]).set(since)
                app = build(Config.model_validate(cfg))
                row["scripts" if scripts else "no_scripts"] = _cycle(app)
                app.close()
        rows.append(row)
        for _ in range(240):  # the next run starts on a quiet cluster
            states = _array_states(cluster, array_id)
            if len(states) >= tasks and all(s in TERMINAL for s in states):
                break
            time.sleep(0.5)
    return rows


def _start_daemon(cfg: dict, tmp: str) -> subprocess.Popen:
    Path(f"{tmp}/config.json").write_text(json.dumps(cfg))
    log = open(f"{tmp}/daemon.log", "w")  # noqa: SIM115 -- the child holds it
    try:
        return subprocess.Popen([sys.executable, "-m", "ccadapter", "daemon", "--config",
                                 f"{tmp}/config.json", "--log-level", "info"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    finally:
        log.close()


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def steady_rss(cluster, runs: int) -> list[float]:
    """RSS of `ccadapter daemon` idling on the cluster (2 s poll), read every 4 s."""
    from tests.standin.ccbackend import CcBackendStandin

    with tempfile.TemporaryDirectory() as tmp, CcBackendStandin(
            "t", clusters=[cluster.name]) as standin:
        daemon = _start_daemon(_app_config(cluster, standin, tmp, slurmPollInterval=2), tmp)
        rss = []
        for _ in range(runs):
            time.sleep(4)
            rss.append(rss_mb(daemon.pid))
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    return rss


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(utime + stime, cutime + cstime) of a process, in seconds, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return ((int(fields[11]) + int(fields[12])) / tick,
            (int(fields[13]) + int(fields[14])) / tick)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def _settle(pids: list[int], timeout: float = 90) -> None:
    """Until no daemon used more than 20 ms of CPU in 2 s: what the start-up cycles
    enqueued (the lookback re-reads the last hour) has been delivered."""
    until = time.time() + timeout
    last = [cpu_seconds(pid)[0] for pid in pids]
    while time.time() < until:
        time.sleep(2)
        now = [cpu_seconds(pid)[0] for pid in pids]
        if all(b - a <= 0.02 for a, b in zip(last, now, strict=True)):
            return
        last = now


def idle_cpu(clusters, window: float, poll: int = 60) -> list[dict]:
    """One `ccadapter daemon` per cluster, all at once, idling with ``poll`` s between
    cycles: CPU seconds spent over ``window`` seconds, counted after the first cycles (those
    of every routine, which all run at start) are done. ``children`` is the CPU of the Slurm
    commands the daemon ran and reaped in the window."""
    from contextlib import ExitStack

    from tests.standin.ccbackend import CcBackendStandin

    with ExitStack() as stack:
        daemons = []
        for cluster in clusters:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            standin = stack.enter_context(CcBackendStandin("t", clusters=[cluster.name]))
            cfg = _app_config(cluster, standin, tmp, slurmPollInterval=poll)
            daemons.append((cluster, tmp, _start_daemon(cfg, tmp)))
            stack.callback(_stop, daemons[-1][2])
        until = time.time() + 120
        for _, tmp, _ in daemons:  # the start-up cycles of every routine are done
            while "nodestate:" not in Path(f"{tmp}/daemon.log").read_text():
                if time.time() > until:
                    raise TimeoutError(f"no first cycle: {Path(tmp, 'daemon.log').read_text()}")
                time.sleep(0.5)
        _settle([p.pid for _, _, p in daemons])
        before = [cpu_seconds(p.pid) for _, _, p in daemons]
        started = time.monotonic()
        time.sleep(window)
        after = [cpu_seconds(p.pid) for _, _, p in daemons]
        elapsed = time.monotonic() - started
        for cluster, tmp, proc in daemons:  # a daemon that died idled for less than the window
            if proc.poll() is not None:
                raise RuntimeError(f"{cluster.name}: daemon exited {proc.returncode}: "
                                   f"{Path(tmp, 'daemon.log').read_text()[-2000:]}")
        rows = []
        for (cluster, _, proc), b, a in zip(daemons, before, after, strict=True):
            rows.append({"version": cluster.version, "window": elapsed,
                         "cpu_s": a[0] - b[0], "children_s": a[1] - b[1],
                         "rss_mb": rss_mb(proc.pid)})
            proc.send_signal(signal.SIGTERM)
        for row, (_, _, proc) in zip(rows, daemons, strict=True):
            row["exit"] = proc.wait(60)
    return rows


def live(runs: int) -> list[dict]:
    """Per cluster: Slurm calls of one idle cycle, and the daemon's steady RSS."""
    from tests.integration.workload import testbed_clusters

    rows = []
    for cluster in testbed_clusters():
        calls = [c["calls"] for c in idle_cycle_calls(cluster, runs)]
        rss = steady_rss(cluster, runs)
        totals = sorted(sum(c.values()) for c in calls)
        rows.append({"version": cluster.version, "calls": calls[len(calls) // 2],
                     "calls_median": statistics.median(totals), "calls_max": totals[-1],
                     "rss_mb": statistics.median(rss)})
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
