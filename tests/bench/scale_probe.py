"""What the scale benchmark (tests.bench.scale) reads off a running daemon and the test bed:
CPU and RSS from /proc, the cost the daemon logs per cycle, start latencies from Slurm's
clock, and the anchor's per-poll commands. Pure helpers and thin /proc readers, no policy."""

from __future__ import annotations

import ast
import os
import re
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ccadapter.slurm.formats.listing import ENDED, STEP_FIELDS
from tests.testbed.measure_commands import median_cost, run_once

TICK = os.sysconf("SC_CLK_TCK")
# The daemon's --log-level that writes a line per cycle (debug lines of ccadapter.daemon only:
# the rest at its default, info, so that logging costs what it costs in production).
CYCLE_LINES = "info,ccadapter.daemon=debug"
CYCLE = re.compile(r"ccadapter\.daemon: (?P<name>[\w-]+): (?P<summary>\{.*\}) \([\d.]+ s\)$")


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (state first)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def descendants(pid: int) -> list[int]:
    """The processes running under ``pid`` now (children, theirs, ...): the daemon's
    long-lived scontrol and whatever Slurm command runs at this moment. Each thread's
    ``children`` file names those it started (proc(5))."""
    found, todo = [], [pid]
    while todo:
        kids = []
        for path in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            try:
                kids += [int(k) for k in path.read_text().split()]
            except OSError:
                continue  # the thread or process ended meanwhile
        found += kids
        todo += kids
    return found


def own_cpu_seconds(pid: int) -> float:
    """User + system seconds of the process alone (utime, stime), without its children."""
    return sum(int(f) for f in _stat(pid)[11:13]) / TICK


def cpu_seconds(pid: int) -> float:
    """User + system seconds of the process, of its children it waited for (the Slurm
    commands it ran: cutime, cstime of /proc/PID/stat) and of those still running (a
    long-lived scontrol is accounted to its parent only when it ends)."""
    total = sum(int(f) for f in _stat(pid)[11:15])
    for child in descendants(pid):
        try:
            total += sum(int(f) for f in _stat(child)[11:15])
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile: its parent's cutime has it
    return total / TICK


def children_rss_mb(pid: int) -> float:
    """VmRSS of the processes running under ``pid``, summed (pages they share with each
    other count twice)."""
    total = 0.0
    for child in descendants(pid):
        try:
            total += status_mb(child, "VmRSS")
        except (OSError, RuntimeError, IndexError):
            continue
    return total


def status_mb(pid: int, key: str) -> float:
    """A kB figure of /proc/PID/status (VmRSS, VmHWM) in MB."""
    text = Path(f"/proc/{pid}/status").read_text()
    if f"{key}:" not in text:  # a zombie: the daemon exited, its parent has not reaped it
        raise RuntimeError(f"process {pid} has no {key}: it exited (see its log)")
    return int(text.split(f"{key}:")[1].split()[0]) / 1024


def reset_peak(pid: int) -> None:
    """Start VmHWM afresh (proc(5): writing 5 to clear_refs resets the peak RSS)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


class RssSampler(threading.Thread):
    """VmRSS every ``every`` seconds until stopped. With the daemon's ``log``: each rise of
    at least ``step_mb`` between two samples, with the lines the daemon logged meanwhile
    (which cycle or delivery was under way when the heap grew)."""

    def __init__(self, pid: int, every: float = 2.0, log: Path | None = None,
                 step_mb: float = 0.5) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.pid, self.every, self.log, self.step_mb = pid, every, log, step_mb
        self.samples: list[float] = []
        self.children: list[float] = []  # children_rss_mb at each sample
        self.steps: list[dict] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        offset = self.log.stat().st_size if self.log else 0
        t0 = time.monotonic()
        while not self._stop_event.wait(self.every):
            try:
                rss = status_mb(self.pid, "VmRSS")
            except (OSError, RuntimeError):
                return
            lines: list[str] = []
            if self.log:
                with self.log.open("rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read()
                offset += len(chunk)
                lines = chunk.decode(errors="replace").splitlines()
            if self.samples and rss - self.samples[-1] >= self.step_mb:
                self.steps.append({"at_s": round(time.monotonic() - t0, 1),
                                   "from_mb": self.samples[-1], "to_mb": rss,
                                   "logged": summarise_lines(lines)})
            self.samples.append(rss)
            self.children.append(children_rss_mb(self.pid))

    def stop(self) -> list[float]:
        self._stop_event.set()
        self.join(10)
        return self.samples


def summarise_lines(lines: list[str], keep: int = 8) -> list[str]:
    """A few log lines, each cut to its logger and start: the cycles by name, the rest
    counted by logger (a burst of deliveries is one entry)."""
    named: list[str] = []
    counted: Counter[str] = Counter()
    for line in lines:
        if m := CYCLE.search(line):
            named.append(f"cycle {m['name']}")
        elif len(words := line.split(" ", 2)) >= 2:
            counted[words[1].rstrip(":")] += 1
    return (named + [f"{n} x {k}" for k, n in counted.most_common()])[:keep]


def cycles(log_text: str) -> list[tuple[str, dict]]:
    """The cycle summaries the daemon logged (ccadapter.daemon.cost adds ``cost``)."""
    out = []
    for line in log_text.splitlines():
        m = CYCLE.search(line)
        if m:
            out.append((m["name"], ast.literal_eval(m["summary"])))
    return out


def per_reconciler(seen: Iterable[tuple[str, dict]]) -> dict[str, dict]:
    """Per reconciler: cycles, median and max wall and CPU (the daemon's own, and with the
    Slurm commands' own processes: ``total_cpu``), the wall spent waiting for Slurm's
    commands and the longest wall outside them, median commands and bytes."""
    by: dict[str, list[dict]] = {}
    for name, summary in seen:
        if "cost" in summary:
            by.setdefault(name, []).append(summary["cost"])
    out = {}
    for name, costs in sorted(by.items()):
        def col(key: str, costs: list[dict] = costs) -> list[float]:
            return [float(c.get(key, 0)) for c in costs]
        out[name] = {"cycles": len(costs),
                     "wall_median": round(statistics.median(col("seconds")), 3),
                     "wall_max": round(max(col("seconds")), 3),
                     "cpu_median": round(statistics.median(col("cpu")), 3),
                     "cpu_max": round(max(col("cpu")), 3),
                     "total_cpu_median": round(statistics.median(
                         c + s for c, s in zip(col("cpu"), col("slurm_cpu"), strict=True)), 3),
                     "total_cpu_max": round(max(
                         c + s for c, s in zip(col("cpu"), col("slurm_cpu"), strict=True)), 3),
                     # the wall waited for Slurm's commands, and the rest (ccadapter's
                     # own part: parsing, the outbox, the locks it waited for)
                     "slurm_wall_median": round(statistics.median(col("slurm_seconds")), 3),
                     "slurm_wall_max": round(max(col("slurm_seconds")), 3),
                     "own_wall_max": round(max(
                         w - sw for w, sw in zip(col("seconds"), col("slurm_seconds"),
                                                 strict=True)), 3),
                     "commands_median": statistics.median(col("slurm_commands")),
                     "bytes_median": statistics.median(col("slurm_bytes")),
                     "bytes_max": max(col("slurm_bytes"))}
    return out


def read_stamps(path: Path, context: str = "prolog_slurmctld") -> dict[int, float]:
    """First time the hook wrapper ran for each job in ``context`` (tests/testbed/slurm)."""
    out: dict[int, float] = {}
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == context and parts[0].isdigit():
            out.setdefault(int(parts[0]), float(parts[2]))
    return out


def percentiles(values: Sequence[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    v = sorted(values)
    return {"n": len(v), "p50": round(v[len(v) // 2], 3),
            "p95": round(v[min(len(v) - 1, int(0.95 * len(v)))], 3), "max": round(v[-1], 3)}


@dataclass
class Latency:
    """Start latency of the runs whose PrologSlurmctld ran within a window: from that
    moment (Slurm's clock) and from the job's StartTime (whole seconds in Slurm)."""

    from_prolog: list[float] = field(default_factory=list)
    from_start_time: list[float] = field(default_factory=list)
    missing: int = 0  # started in the window, never received by the stand-in

    def summary(self) -> dict:
        return {"from_prolog": percentiles(self.from_prolog),
                "from_start_time": percentiles(self.from_start_time), "missing": self.missing}


def start_latency(stamps: dict[int, float], received: dict[int, float],
                  start_times: dict[int, int], ids: Iterable[int], t0: float,
                  t1: float) -> Latency:
    """``received``: job id -> when the stand-in took its first start (time.time())."""
    lat = Latency()
    for job_id in ids:
        stamp = stamps.get(job_id)
        if stamp is None or not t0 <= stamp < t1:
            continue
        got = received.get(job_id)
        if got is None:
            lat.missing += 1
            continue
        lat.from_prolog.append(got - stamp)
        if start_times.get(job_id):
            lat.from_start_time.append(got - start_times[job_id])
    return lat


def anchor_commands(prefix: Sequence[str], cluster: str, since: int, until: int,
                    runs: int) -> dict[str, dict]:
    """What cc-slurm-adapter runs per poll (its slurm.go: a sacct window of every job and
    squeue of all jobs, both as JSON), each ``runs`` times; the run of median wall."""
    window = ["sacct", "--cluster", cluster, "--allusers", "--starttime",
              time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since)), "--endtime",
              time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(until)), "--json"]
    queue = ["squeue", "--noheader", "--cluster", cluster, "--all", "--json"]
    out = {}
    for name, argv in (("sacct", window), ("squeue", queue)):
        costs = sorted((run_once([*prefix, *argv], {}) for _ in range(runs)),
                       key=lambda c: c.wall)
        mid = costs[len(costs) // 2]
        out[name] = {"argv": " ".join(argv), "wall": mid.wall,
                     "cpu": round(statistics.median(c.cpu for c in costs), 3),
                     "bytes": mid.out_bytes, "rc": mid.rc}
    return out


def listing_costs(prefix: Sequence[str], cluster: str, since: int, until: int,
                  runs: int, job_ids: Sequence[int]) -> dict[str, dict]:
    """The listings as ccadapter asks them and as it asked before, each ``runs`` times, the
    run of median wall: the window's ended runs (``ENDED``) and slurmctld's steps
    (``squeue -s``), as polls ask since issue 11's last change
    (``ccadapter.reconcilers.activity``); the window with ``-s RUNNING`` (what they asked
    before: slurmdbd reads every queued job's row) and ``-s RUNNING,SUSPENDED`` (before
    that: a scan of every job row, ``ccadapter.slurm.formats.listing.RAN``); slurmctld's job
    list of running jobs (``squeue -t R,S``: it packs every queued job); and ``-j`` of 190 and
    of 500 of ``job_ids`` (from 200 ids MariaDB reads the whole job table, see
    ``ccadapter.slurm.collector.IDS_PER_QUERY``)."""
    fields = ["-o", "JobIDRaw,JobID,Start,End,State,NodeList", "--clusters", cluster]
    base = ["sacct", "-X", "-n", "-P", "--allusers", "--duplicates"]
    window = ["--starttime", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since)),
              "--endtime", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(until))]
    asked = {"ENDED": [*base, *ENDED, *window, *fields],
             "squeue -s": ["squeue", "--all", "-h", "-s", "-O", STEP_FIELDS,
                           "--clusters", cluster],
             "RUNNING": [*base, "-s", "RUNNING", *window, *fields],
             "RUNNING,SUSPENDED": [*base, "-s", "RUNNING,SUSPENDED", *window, *fields],
             "squeue -t R,S": ["squeue", "--all", "-h", "-t", "R,S", "-o", "%A|%i|%S|%T|%N",
                               "--clusters", cluster]}
    for n in (190, 500):
        if len(job_ids) >= n:
            asked[f"-j {n} ids"] = [*base, "--jobs", ",".join(map(str, job_ids[-n:])),
                                    *fields]
    out = {}
    for name, argv in asked.items():
        mid = median_cost([*prefix, *argv], runs, {})
        out[name] = {"wall": mid.wall, "bytes": mid.out_bytes, "rc": mid.rc}
    return out
