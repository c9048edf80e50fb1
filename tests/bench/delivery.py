"""Benchmarks of the sync engine (issues 3 and 7), as functions for tests.bench.all.

1. Pipeline (``throughput``): the whole ``ccadapter daemon`` process enqueues a backlog of
   N jobs (start + stop each) from a replayed Slurm (tests.bench.replay_slurm: copies of the
   recorded 24.11 jobs, joined with slurmctld's recorded view) while cc-backend is down, then
   drains it once the real cc-backend 1.5.4 (tests.bench.receivers) is up. Jobs/s over the
   enqueue, beside the collector's parse rate of the same sacct answers
   (tests.bench.collector); events/s over the drain, beside the ceiling of the same server
   measured in the same run by a minimal client (tests.bench.ceiling); RSS of the daemon
   sampled throughout, peak from VmHWM. A run fails unless every event was delivered, none
   rejected, and cc-backend holds every job.
2. Steady RSS of `ccadapter daemon` idling on each test-bed cluster (2 s poll, so that
   several cycles are seen).
3. Slurm invocations per cycle per cluster (slurm-window, stale-jobs, nodestate), idle and busy
   (a short array running and ending inside the window).
4. CPU used by `ccadapter daemon` idling with the default 60 s poll (``idle_cpu``).

Run: .venv/bin/python -m tests.bench.all --only pipeline (or cycles, memory, idle-cpu).
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from zoneinfo import ZoneInfo

from ccadapter.config.keys import Config
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.runtime.lastrun import LastRun
from tests.bench.receivers import (
    CC_BACKEND,
    STANDIN,
    RealCcBackend,
    Receiver,
    Standin,
)
from tests.ccbackend import Nodes
from tests.conftest import FIXTURES

BENCH_CLUSTER = "cluster24"
QUIET_WAIT = 130.0  # idle cycles: how long to wait for a window without jobs
MEMORY_POLL = 2  # steady RSS: the daemon's slurmPollInterval ...
MEMORY_EVERY = 4.0  # ... and the seconds between two readings


def real_jobs():
    """Started jobs of the 24.11 test-bed recording, with allocations (busy snapshot)."""
    from ccadapter.slurm.collector import Collector, CollectorSettings
    from tests.conftest import FIXTURES
    from tests.fakeslurm import RecordedSlurm

    base = FIXTURES / "24.11" / "testbed"
    window = (base / "sacct-window.json").read_text()
    busy = (base / "scontrol-d-busy.txt").read_text()
    meta = json.loads((base / "workload.json").read_text())
    clock = lambda: meta["since"] + 60  # noqa: E731
    config = Config(slurmFetchJobScripts=False)
    collector = Collector(RecordedSlurm("24.11", window, busy, clock=clock),
                          CollectorSettings.from_config(config),
                          clock=clock, tz=ZoneInfo("UTC"))
    return [j for j in collector.window(meta["since"]).jobs if j.started and j.finished]


def fill_outbox(path: Path, n_events: int) -> None:
    """``n_events`` pending events in a new outbox: a start and a stop each of copies of the
    recorded jobs, renumbered. Not of the het job: its events carry its components' ids,
    so its copies would be one run to the outbox."""
    from dataclasses import replace

    from ccadapter.outbox import Outbox

    jobs = [j for j in real_jobs() if not j.het_components]
    box = Outbox(path)
    events = []
    for i in range(n_events // 2):
        job = replace(jobs[i % len(jobs)], job_id=1_000_000 + i)
        events.extend(events_for(job))
    added = box.enqueue(events)
    box.close()
    if added != n_events // 2 * 2:
        raise RuntimeError(f"the outbox holds {added} events, not {n_events // 2 * 2}")


CHUNK_JOBS = 5_000  # jobs per sacct window the replayed Slurm hands out
FIRST_ID = 1_000_000  # the first job id of the backlog (tests.bench.replay_slurm knows it)
# The pipeline daemon's slurmPollInterval. The replayed Slurm hands out a chunk per listing,
# whatever span it asks: CHUNK_JOBS runs ending every poll, 2,500 jobs/s at 2 s, more than
# the daemon takes, so that the enqueue rate is the daemon's, not the offered load's (at
# 5 s, 1,000 jobs/s was the most it could show). A cycle that takes longer than the poll is
# followed at once (ccadapter.daemon.loop); a real backlog is one window read in slices, never
# paced by the poll.
BACKLOG_POLL = 2


def write_backlog(base: Path, n_jobs: int, now: float) -> None:
    """The replayed Slurm's answers (tests.bench.replay_slurm) for ``n_jobs`` jobs: copies of
    the recorded 24.11 runs that started and ended (ids renumbered, times moved to end a few
    minutes before ``now`` so that the collector joins slurmctld's view), in windows of
    CHUNK_JOBS, with the matching ``scontrol show job -d`` blocks of the busy snapshot."""
    from tests.bench.replay_slurm import listing_lines

    src = FIXTURES / "24.11" / "testbed"
    doc = json.loads((src / "sacct-window.json").read_text())
    busy = (src / "scontrol-d-busy.txt").read_text()
    blocks = {int(b.split()[0][6:]): b.strip("\n") for b in busy.split("\n\n")
              if b.strip().startswith("JobId=")}
    # a het job's components are left out: copied under new ids, they would still name
    # their leader (het.job_id) and be merged into one job, or dropped without it
    base_recs = [r for r in doc["jobs"] if r["time"]["start"] and r["time"]["end"]
                 and r.get("nodes") not in (None, "", "None assigned")
                 and not (r.get("het") or {}).get("job_id")]
    (base / "cluster").write_text(doc["jobs"][0]["cluster"])
    (base / "empty.json").write_text(json.dumps({**doc, "jobs": []}))
    (base / "chunk_jobs").write_text(str(CHUNK_JOBS))
    for chunk, first in enumerate(range(0, n_jobs, CHUNK_JOBS)):
        recs, ctl = [], []
        for i in range(first, min(n_jobs, first + CHUNK_JOBS)):
            orig = base_recs[i % len(base_recs)]
            rec = copy.deepcopy(orig)
            job_id = FIRST_ID + i
            ran = orig["time"]["end"] - orig["time"]["start"]
            start = int(now) - 300 - ran
            rec["job_id"] = job_id
            rec["time"]["start"], rec["time"]["end"] = start, start + ran
            rec["time"]["submission"] = rec["time"]["eligible"] = start - 1
            recs.append(rec)
            block = blocks.get(orig["job_id"])
            if block:
                block = block.replace(f"JobId={orig['job_id']} ", f"JobId={job_id} ", 1)
                block = re.sub(r"StartTime=\S+", "StartTime=" + time.strftime(
                    "%Y-%m-%dT%H:%M:%S", time.gmtime(start)), block)
                ctl.append(block)
        (base / f"window-{chunk:03d}.json").write_text(json.dumps({**doc, "jobs": recs}))
        # the same chunk as the replayed Slurm reads it by job id: a record per line, and
        # its listing line per line, in job-id order (see tests.bench.replay_slurm)
        lines = [json.dumps(r) + "\n" for r in recs]
        (base / f"records-{chunk:03d}.jsonl").write_text("".join(lines))
        (base / f"records-{chunk:03d}.at").write_text(" ".join(map(str, itertools.accumulate(
            (len(line.encode()) for line in lines), initial=0))))
        (base / f"listing-{chunk:03d}.txt").write_text(listing_lines({"jobs": recs}))
        (base / f"controller-{chunk:03d}.txt").write_text("\n\n".join(ctl) + "\n")


def _outbox_counts(path: Path) -> dict[str, int]:
    """kind:status -> events, read beside the running daemon (WAL: readers do not block)."""
    if not path.exists():
        return {}
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return dict(db.execute("SELECT kind || ':' || status, count(*) FROM events "
                               "GROUP BY 1").fetchall())
    except sqlite3.OperationalError:  # the daemon has not created its tables yet
        return {}
    finally:
        db.close()


def _status_kb(pid: int, key: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split(f"{key}:")[1].split()[0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backlog_nodes() -> Nodes:
    """The hosts of the backlog's jobs as cc-backend's cluster.json must name them (a start
    on a host it does not know is a 400), those given GPUs in a subcluster of their own."""
    from ccadapter.cc.payload import start_job_body

    hosts: set[str] = set()
    gpu: set[str] = set()
    for job in real_jobs():
        for res in start_job_body(job)["resources"]:
            hosts.add(res["hostname"])
            if res.get("accelerators"):
                gpu.add(res["hostname"])
    return Nodes(tuple(sorted(hosts)), tuple(sorted(gpu)))


def receiver_of(name: str) -> Receiver:
    """The receiver called ``name`` (tests.bench.receivers), made for BENCH_CLUSTER."""
    if name == CC_BACKEND:
        return RealCcBackend(BENCH_CLUSTER, backlog_nodes())
    if name == STANDIN:
        return Standin(BENCH_CLUSTER)
    raise ValueError(f"no receiver {name!r}")


def daemon_backlog(n_jobs: int, base: Path, timeout: float = 3600,
                   lookback: float = 600, receiver: str = CC_BACKEND,
                   keep_outbox: Path | None = None) -> dict:
    """One run: ``ccadapter daemon`` enqueues ``n_jobs`` jobs (start + stop each) from the
    replayed Slurm while the receiver is down; then the receiver (tests.bench.receivers:
    the real cc-backend, or the stand-in) comes up and the daemon drains the backlog.
    ``lookback``: seconds from lastRun to now (three days: a catch-up in hourly slices).
    ``keep_outbox``: where to copy the outbox afterwards (the ceiling reads the bodies
    sent). Returns the raw figures; raises unless the outbox drained with every event
    delivered and none rejected, and the receiver holds every job stopped."""
    (base / "served").unlink(missing_ok=True)
    server = receiver_of(receiver)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {"ccRestUrl": server.url, "ccRestJwt": server.token,
               "pidFilePath": f"{tmp}/daemon.pid", "lastRunPath": f"{tmp}/lastrun",
               "prepSockListenPath": f"{tmp}/daemon.sock", "stateDirectory": f"{tmp}/state",
               "slurmCommandPrefix": [sys.executable, "-m", "tests.bench.replay_slurm",
                                      str(base)],
               "slurmPollInterval": BACKLOG_POLL, "slurmFetchJobScripts": False}
        LastRun(cfg["lastRunPath"]).set(time.time() - lookback)
        outbox = Path(tmp, "state", "outbox.sqlite")
        started = time.monotonic()
        daemon = _start_daemon(cfg, tmp, env={**os.environ, "TZ": "UTC"})
        rss_enqueue: list[int] = []
        rss_drain: list[int] = []
        cpu_enqueue = (0.0, 0.0)
        try:
            want = {"start": n_jobs, "stop": n_jobs}

            def stored() -> bool:
                c = _outbox_counts(outbox)
                return all(sum(v for k, v in c.items() if k.startswith(f"{kind}:")) >= n
                           for kind, n in want.items())
            _until(stored, started + timeout, daemon, rss_enqueue, tmp, "backlog not enqueued")
            enqueued = time.monotonic()
            cpu_enqueue = cpu_seconds(daemon.pid)
            server.start()
            up = time.monotonic()

            def drained() -> bool:
                c = _outbox_counts(outbox)
                return not c.get("start:pending") and not c.get("stop:pending")
            _until(drained, up + timeout, daemon, rss_drain, tmp, "backlog not drained")
            done = time.monotonic()
            cpu_end = cpu_seconds(daemon.pid)
            counts = _outbox_counts(outbox)
            hwm = _status_kb(daemon.pid, "VmHWM")
            rss_end = _status_kb(daemon.pid, "VmRSS")
            progress = [line.split("slurm-window: ", 1)[1][:60] for line in
                        Path(tmp, "daemon.log").read_text().splitlines() if ": slice " in line]
        finally:
            _stop(daemon)
            if daemon.returncode == 0 and keep_outbox is not None:
                shutil.copyfile(outbox, keep_outbox)
        try:
            held = server.check(n_jobs) if daemon.returncode == 0 else {}
        finally:
            server.stop()
        if daemon.returncode != 0:
            raise RuntimeError(f"daemon exited {daemon.returncode}: "
                               f"{Path(tmp, 'daemon.log').read_text()[-2000:]}")
    rejected = {k: v for k, v in counts.items() if k.endswith(":rejected")}
    delivered = {k: counts.get(f"{k}:delivered", 0) for k in want}
    if rejected or delivered != want:
        raise RuntimeError(f"outbox after the drain: {counts} (want {want} delivered, none "
                           "rejected)")
    return {"receiver": server.name, "jobs": n_jobs, "events": 2 * n_jobs,
            "enqueue_s": enqueued - started, "jobs_per_s": n_jobs / (enqueued - started),
            "drain_s": done - up, "events_per_s": 2 * n_jobs / (done - up),
            "cpu_enqueue_s": cpu_enqueue[0], "slurm_cpu_enqueue_s": cpu_enqueue[1],
            "cpu_drain_s": cpu_end[0] - cpu_enqueue[0],
            "rss_end_mb": rss_end / 1024, "peak_rss_mb": hwm / 1024,
            "rss_enqueue_mb": [round(r / 1024, 1) for r in rss_enqueue],
            "rss_drain_mb": [round(r / 1024, 1) for r in rss_drain], "outbox": counts,
            "held": held, "progress_lines": len(progress), "progress_last": progress[-1:]}


def _until(pred, deadline: float, daemon: subprocess.Popen, rss: list[int], tmp: str,
           what: str) -> None:
    """Wait for ``pred``, sampling the daemon's RSS every half second. A command the
    replayed Slurm cannot answer ends the run at once (else it would wait for the deadline:
    the daemon logs the failure and polls again)."""
    log, read = Path(tmp, "daemon.log"), 0
    while not pred():
        if daemon.poll() is not None:
            raise RuntimeError(f"daemon exited {daemon.returncode}: "
                               f"{log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        with log.open("rb") as fh:
            fh.seek(read)
            new = fh.read()
        read += len(new)
        if (at := new.find(b"replay_slurm: no answer")) >= 0:
            raise RuntimeError(new[at:at + 300].decode(errors="replace").splitlines()[0])
        rss.append(_status_kb(daemon.pid, "VmRSS"))
        time.sleep(0.5)


def throughput(runs: int, n_jobs: int, ceiling_runs: int = 1) -> list[dict]:
    """``runs`` runs of :func:`daemon_backlog` against the real cc-backend, each over a
    freshly written backlog, and beside each the ceiling of the same server
    (tests.bench.ceiling) for the same bodies; and with each, the rate at which the
    collector alone reads the backlog's sacct answers (tests.bench.collector)."""
    from tests.bench.ceiling import bodies_of, ceiling
    from tests.bench.collector import backlog_parse_rate

    out = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="ccadapter-bench-backlog-") as tmp:
            write_backlog(Path(tmp), n_jobs, time.time())
            kept = Path(tmp, "outbox-after.sqlite")
            row = daemon_backlog(n_jobs, Path(tmp), keep_outbox=kept)
            bodies = bodies_of(kept)
            kept.unlink()
            top = ceiling(bodies, BENCH_CLUSTER, backlog_nodes())
            row["ceiling"] = top
            row["ceiling_events_per_s"] = top["events_per_s"]
            row["ratio"] = row["events_per_s"] / top["events_per_s"]
            row["parse"] = backlog_parse_rate(Path(tmp), n_jobs)
            row["parse_jobs_per_s"] = row["parse"]["jobs_per_s"]
        out.append(row)
    return out


def daemon_workers() -> int:
    """How many delivery workers ``ccadapter daemon`` runs (app.build's default)."""
    import inspect

    from ccadapter.daemon.build import build

    return inspect.signature(build).parameters["workers"].default


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
    return {"calls": calls, "jobs": window["runs"]}  # runs the window listed


def idle_cycle_calls(cluster, runs: int, quiet_wait: float = QUIET_WAIT) -> list[dict]:
    """``runs`` idle cycles, 1 s apart, once a cycle's window
    (which re-reads slurmWindowOverlap, 120 s) holds no job or ``quiet_wait`` has passed;
    each cycle says how many jobs its window held."""
    from ccadapter.daemon.build import build
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
    from ccadapter.daemon.build import build
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


def _start_daemon(cfg: dict, tmp: str, env: dict | None = None) -> subprocess.Popen:
    Path(f"{tmp}/config.json").write_text(json.dumps(cfg))
    log = open(f"{tmp}/daemon.log", "w")  # noqa: SIM115 -- the child holds it
    try:
        return subprocess.Popen([sys.executable, "-m", "ccadapter", "daemon", "--config",
                                 f"{tmp}/config.json", "--log-level", "info"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
    finally:
        log.close()


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def steady_rss(cluster, runs: int) -> list[float]:
    """RSS of `ccadapter daemon` idling on the cluster (MEMORY_POLL s poll), read every
    MEMORY_EVERY s."""
    from tests.standin.ccbackend import CcBackendStandin

    with tempfile.TemporaryDirectory() as tmp, CcBackendStandin(
            "t", clusters=[cluster.name]) as standin:
        cfg = _app_config(cluster, standin, tmp, slurmPollInterval=MEMORY_POLL)
        daemon = _start_daemon(cfg, tmp)
        rss = []
        for _ in range(runs):
            time.sleep(MEMORY_EVERY)
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


# A daemon is settled once it used at most QUIET_CPU seconds of CPU in QUIET_SPAN seconds.
QUIET_CPU = 0.02
QUIET_SPAN = 2.0


def _settle(pids: list[int], timeout: float = 90) -> None:
    """Until no daemon used more than QUIET_CPU of CPU in QUIET_SPAN: what the start-up
    cycles enqueued (the lookback re-reads the last hour) has been delivered."""
    until = time.time() + timeout
    last = [cpu_seconds(pid)[0] for pid in pids]
    while time.time() < until:
        time.sleep(QUIET_SPAN)
        now = [cpu_seconds(pid)[0] for pid in pids]
        if all(b - a <= QUIET_CPU for a, b in zip(last, now, strict=True)):
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


if __name__ == "__main__":
    from tests.bench.all import main

    sys.exit(main(["--only", "pipeline", *sys.argv[1:]]))
