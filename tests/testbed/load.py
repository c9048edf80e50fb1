"""Load for the scale profile of the test bed (issue 11): a held queue and a job churn.

Against clusterscale (``tests/testbed/slurm up scale``) or any cluster given its client prefix,
it

- fills and then holds ``--queued N`` pending jobs, single jobs in the partition ``queue``
  (DOWN on clusterscale, so they stay pending yet eligible and appear in sacct windows; with
  ``--held`` they are held with ``sbatch -H`` instead: not eligible, not in sacct windows), and
  tops them up when some disappear;
- keeps at least ``--running R`` jobs running and churns ``--churn J`` jobs per second in the
  partition ``batch`` for ``--duration S`` seconds: each job runs R/J seconds and one is
  submitted every 1/J s, so as many end as start. It starts with R jobs whose run times are
  spread over 1/J .. R/J s, so that from the first second one of them ends every 1/J s. The
  running count is read from ``sinfo`` (allocated CPUs, one per job; no job list); when it
  stays below R for three readings without catching up, the gap is filled;
- appends every job id sbatch returned, with its submit time and kind (``queued``/``churn``),
  to a JSON-lines file (``--record FILE``): benchmarks count these ids against what reached
  cc-backend;
- prints progress on stderr and a summary (fill time and rate, achieved churn) as JSON on
  stdout.

Each job is one ``sbatch --parsable`` process with the script on stdin (so chroot prefixes work
too), several at once (``--workers``, default 4). On the 2-core test machine (shared with other
tests): 150 jobs/s one at a time and 300-360 jobs/s four at once into a small, idle cluster;
95-100 jobs/s all the way from 0 to 40,000 queued without the churn (16 nodes), so 50,000
take about 9 minutes when filled first, as this generator does. Filling while a churn of
5 jobs/s runs (128 nodes, the hook) is slower: 99 jobs/s up to 10,000, 37 jobs/s from
10,000 to 50,000 (eight workers no faster). There slurmctld is the limit, not sbatch: each
submission waits 140 ms on average for its job lock, which the job completions and
scheduler passes hold, while the sbatch processes use 13 % of a core. A libslurm helper
would not help.

Run from the repository root, standard library only::

    python3 -m tests.testbed.load --queued 50000 --running 500 --churn 5 --duration 900 \\
        --record /tmp/load.jsonl
    python3 -m tests.testbed.load --queued 10000 --fill-only --record /tmp/load.jsonl
    python3 -m tests.testbed.load --cancel-all

The same from Python: ``Load`` (see ``tests/integration/scale_bed.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

SCALE_PREFIX = ("env", "SLURM_CONF=/etc/slurm-scale/slurm.conf")
QUEUED, CHURN = "queued", "churn"
JOB_NAMES = {QUEUED: "ccload-queued", CHURN: "ccload-churn"}
SBATCH_TIMEOUT = 60.0


@dataclass(frozen=True)
class Submission:
    """One job sbatch accepted."""

    job_id: int
    submit: float  # when sbatch returned the id (epoch seconds)
    kind: str  # QUEUED or CHURN

    def to_json(self) -> str:
        return json.dumps({"id": self.job_id, "submit": round(self.submit, 3),
                           "kind": self.kind})


def read_record(path: Path) -> list[Submission]:
    """The submissions of a ``--record`` file."""
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                d = json.loads(line)
                out.append(Submission(int(d["id"]), float(d["submit"]), d["kind"]))
    return out


class Recorder:
    """Every submission, in memory and (when given a path) appended to a JSON-lines file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._items: list[Submission] = []
        self._fh: TextIO | None = path.open("a", encoding="utf-8") if path else None

    def add(self, sub: Submission) -> None:
        with self._lock:
            self._items.append(sub)
            if self._fh:
                self._fh.write(sub.to_json() + "\n")
                self._fh.flush()  # a crash must not lose ids that Slurm already has

    def submissions(self, kind: str | None = None) -> list[Submission]:
        with self._lock:
            return [s for s in self._items if kind is None or s.kind == kind]

    def close(self) -> None:
        with self._lock:
            if self._fh:
                self._fh.close()
                self._fh = None


@dataclass
class FillResult:
    requested: int
    submitted: int
    seconds: float
    errors: int
    last_error: str = ""

    @property
    def rate(self) -> float:
        return self.submitted / self.seconds if self.seconds else 0.0


@dataclass
class ChurnResult:
    seconds: float = 0.0
    target_running: int = 0
    target_rate: float = 0.0
    submitted: int = 0  # churn jobs, the initial ones included
    initial: int = 0  # of which submitted at the start (run times spread over R/J s)
    errors: int = 0
    topped_up_running: int = 0  # extra jobs submitted because fewer than R ran
    topped_up_queued: int = 0
    started: int = 0  # slurmctld's counters (sdiag) over the churn
    completed: int = 0
    running_samples: list[int] = field(default_factory=list)  # allocated CPUs of batch
    last_error: str = ""

    def summary(self) -> dict:
        d = asdict(self)
        samples = d.pop("running_samples")
        s = self.seconds or 1.0
        # rates after the initial jobs: those were submitted and started at once
        d.update(submit_rate=round((self.submitted - self.initial) / s, 2),
                 start_rate=round(max(0, self.started - self.initial) / s, 2),
                 end_rate=round(self.completed / s, 2),
                 running_min=min(samples, default=0), running_max=max(samples, default=0),
                 running_mean=round(sum(samples) / len(samples), 1) if samples else 0)
        return d


class Load:
    """Submits and watches the jobs of one cluster (``prefix`` in front of every command)."""

    def __init__(self, prefix: Sequence[str] = SCALE_PREFIX, record: Path | None = None, *,
                 workers: int = 4, queue_partition: str = "queue",
                 batch_partition: str = "batch", held: bool = False,
                 log: Callable[[str], None] | None = None) -> None:
        self.prefix = tuple(prefix)
        self.recorder = Recorder(record)
        self.workers = workers
        self.queue_partition, self.batch_partition = queue_partition, batch_partition
        self.held = held
        self._count_lock = threading.Lock()  # ChurnResult counters, updated by many threads
        self.log = log or (lambda msg: print(f"[load] {msg}", file=sys.stderr, flush=True))

    # -- Slurm commands -----------------------------------------------------------------------

    def run(self, *argv: str, stdin: str | None = None, timeout: float = 120) -> str:
        proc = subprocess.run([*self.prefix, *argv], input=stdin, capture_output=True,
                              text=True, encoding="utf-8", errors="replace",
                              timeout=timeout, check=False,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} rc={proc.returncode}: {proc.stderr.strip()[:300]}")
        return proc.stdout

    def _sbatch_args(self, kind: str, runtime: float) -> tuple[list[str], str]:
        args = ["sbatch", "--parsable", "-J", JOB_NAMES[kind], "-o", "/dev/null",
                "-e", "/dev/null", "--chdir=/tmp", "-n1"]
        if kind == QUEUED:
            args += ["-p", self.queue_partition, "-t", "10"]
            if self.held:
                args.append("-H")
        else:  # a limit a little above the run time, as users give (and backfill uses)
            args += ["-p", self.batch_partition, "-t", str(math.ceil(runtime / 60) + 2)]
        script = f"#!/bin/sh\n# ccadapter test bed load: {kind}\nexec sleep {runtime:.1f}\n"
        return args, script

    def submit(self, kind: str, runtime: float) -> Submission:
        """One job; raises RuntimeError (or TimeoutExpired) when sbatch fails."""
        args, script = self._sbatch_args(kind, runtime)
        out = self.run(*args, stdin=script, timeout=SBATCH_TIMEOUT)
        sub = Submission(int(out.strip().split(";")[0]), time.time(), kind)
        self.recorder.add(sub)
        return sub

    def allocated_cpus(self) -> int:
        """CPUs allocated in the batch partition (one per churn job): cheap, no job list."""
        out = self.run("sinfo", "-h", "-p", self.batch_partition, "-o", "%C").split()
        return int(out[0].split("/")[0]) if out else 0

    def pending_queued(self) -> int:
        """Pending jobs of the queue partition. Costs a full job list from slurmctld."""
        out = self.run("squeue", "-h", "-p", self.queue_partition, "-t", "PD", "-o", "%A")
        return len(out.split())

    def sdiag_counters(self) -> dict[str, int]:
        """slurmctld's cumulative job counters (``Jobs started:`` ...) from sdiag; empty when
        sdiag is refused (it needs an operator)."""
        counters: dict[str, int] = {}
        try:
            out = self.run("sdiag")
        except (RuntimeError, subprocess.TimeoutExpired):
            return counters
        for line in out.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.startswith("Jobs ") and value.strip().isdigit():
                counters[key[5:].strip()] = int(value)
        return counters

    # -- fill -----------------------------------------------------------------------------------

    def fill(self, count: int, kind: str = QUEUED, runtime: float = 60.0) -> FillResult:
        """Submit ``count`` jobs of one kind, ``workers`` sbatch processes at a time."""
        t0 = time.monotonic()
        state = {"next": 0, "done": 0, "errors": 0, "last_error": ""}
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    if state["next"] >= count or state["errors"] > max(50, count // 100):
                        return
                    state["next"] += 1
                try:
                    self.submit(kind, runtime)
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                    with lock:
                        state["errors"] += 1
                        state["last_error"] = str(exc)[:300]
                        state["next"] -= 1  # try that one again
                    time.sleep(0.5)
                    continue
                with lock:
                    state["done"] += 1

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(self.workers)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=5)
            if count >= 1000:
                el = time.monotonic() - t0
                self.log(f"{kind}: {state['done']}/{count} in {el:.0f} s "
                         f"({state['done'] / el:.0f} jobs/s, {state['errors']} errors)")
        res = FillResult(count, state["done"], time.monotonic() - t0, state["errors"],
                         state["last_error"])
        if res.submitted < count:
            self.log(f"{kind}: only {res.submitted} of {count} submitted: {res.last_error}")
        return res

    # -- churn ----------------------------------------------------------------------------------

    def churn(self, running: int, rate: float, duration: float, stop: threading.Event,
              hold_queued: int = 0, check_interval: float = 15.0,
              queued_check_interval: float = 60.0) -> ChurnResult:
        """Keep ``running`` jobs running and submit ``rate`` per second until ``duration``
        seconds passed or ``stop`` is set; top the queue up to ``hold_queued``."""
        res = ChurnResult(target_running=running, target_rate=rate)
        runtime = running / rate
        before = self.sdiag_counters()
        t0 = time.monotonic()
        ramp = [(i + 1) / rate for i in range(running)]  # one ends every 1/rate s from now on
        self.log(f"churn: {running} jobs to start with, then {rate:g}/s of {runtime:.0f} s each")
        self._submit_many([(CHURN, r) for r in ramp], res, stop)
        res.initial = res.submitted
        pace = _Pacer(rate, self.workers, lambda: self._submit_one(CHURN, runtime, res))
        pace.start()
        low: list[int] = []
        next_check, next_queued_check = t0 + check_interval, t0 + 5.0
        try:
            while not stop.wait(0.5):
                now = time.monotonic()
                if now - t0 >= duration:
                    break
                if now >= next_check:
                    next_check = now + check_interval
                    self._check_running(res, running, runtime, low, now - t0)
                if hold_queued and now >= next_queued_check:
                    next_queued_check = now + queued_check_interval
                    self._check_queued(res, hold_queued)
        finally:
            pace.stop()
        res.seconds = time.monotonic() - t0
        after = self.sdiag_counters()
        res.started = max(0, after.get("started", 0) - before.get("started", 0))
        res.completed = max(0, after.get("completed", 0) - before.get("completed", 0))
        return res

    def _submit_one(self, kind: str, runtime: float, res: ChurnResult) -> None:
        try:
            self.submit(kind, runtime)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
            with self._count_lock:
                res.errors += 1
                res.last_error = str(exc)[:300]
            return
        with self._count_lock:
            res.submitted += 1

    def _submit_many(self, jobs: list[tuple[str, float]], res: ChurnResult,
                     stop: threading.Event) -> None:
        lock = threading.Lock()
        todo = list(jobs)

        def worker() -> None:
            while not stop.is_set():
                with lock:
                    if not todo:
                        return
                    kind, runtime = todo.pop(0)
                self._submit_one(kind, runtime, res)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(self.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _check_running(self, res: ChurnResult, running: int, runtime: float,
                       low: list[int], elapsed: float) -> None:
        """Top up when fewer than ``running`` run for three readings without catching up.
        Jobs that start late (a busy scheduler) also end late, so a short dip mends itself;
        jobs that end early (failed) leave a gap that stays. ``low``: the readings so far."""
        try:
            cpus = self.allocated_cpus()
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            res.last_error = str(exc)[:300]
            return
        res.running_samples.append(cpus)
        self.log(f"churn: {elapsed:.0f} s, {cpus} running, {res.submitted} submitted "
                 f"({res.errors} errors)")
        if cpus >= running:
            low.clear()
            return
        low.append(cpus)
        if len(low) < 3 or low[-1] > low[0]:
            return
        missing = running - cpus
        self.log(f"churn: only {cpus} of {running} running for {len(low)} readings: "
                 f"{missing} more")
        for _ in range(missing):
            self._submit_one(CHURN, runtime, res)
        res.topped_up_running += missing
        low.clear()

    def _check_queued(self, res: ChurnResult, hold: int) -> None:
        try:
            pending = self.pending_queued()
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            res.last_error = str(exc)[:300]
            return
        if pending < hold:
            self.log(f"queue: {pending} of {hold} pending, topping up")
            res.topped_up_queued += self.fill(hold - pending).submitted

    # -- cleaning up ----------------------------------------------------------------------------

    def cancel_all(self) -> None:
        """Cancel every job this generator submits (by job name), pending or running."""
        for name in JOB_NAMES.values():
            self.run("scancel", "-n", name, timeout=600)

    def close(self) -> None:
        self.recorder.close()


class _Pacer:
    """Calls ``submit`` ``rate`` times per second on a fixed clock, from ``workers`` threads,
    so that a slow sbatch delays no later submission."""

    def __init__(self, rate: float, workers: int, submit: Callable[[], None]) -> None:
        self.rate, self.submit = rate, submit
        self._stop = threading.Event()
        self._due = 0  # submissions due and not yet taken
        self._cond = threading.Condition()
        self._threads = [threading.Thread(target=self._work, daemon=True)
                         for _ in range(workers)]
        self._clock = threading.Thread(target=self._tick, daemon=True)

    def start(self) -> None:
        for t in [*self._threads, self._clock]:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for t in [self._clock, *self._threads]:
            t.join(timeout=SBATCH_TIMEOUT + 5)

    def _tick(self) -> None:
        t0, k = time.monotonic(), 0
        while not self._stop.is_set():
            k += 1
            if self._stop.wait(max(0.0, t0 + k / self.rate - time.monotonic())):
                return
            with self._cond:
                self._due += 1
                self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._due and not self._stop.is_set():
                    self._cond.wait()
                if self._stop.is_set():
                    return
                self._due -= 1
            self.submit()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m tests.testbed.load",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--prefix", type=json.loads, default=list(SCALE_PREFIX),
                   help="client prefix as a JSON list (default: clusterscale's %(default)s)")
    p.add_argument("--queued", type=int, default=0, help="pending jobs to fill and hold")
    p.add_argument("--held", action="store_true",
                   help="queued jobs held (sbatch -H: not eligible) instead of eligible")
    p.add_argument("--running", type=int, default=500, help="jobs kept running (default 500)")
    p.add_argument("--churn", type=float, default=5.0, help="jobs per second (default 5)")
    p.add_argument("--duration", type=float, default=600.0, help="churn seconds (default 600)")
    p.add_argument("--record", type=Path, help="JSON-lines file the job ids are appended to")
    p.add_argument("--workers", type=int, default=4, help="sbatch processes at once (4)")
    p.add_argument("--check-interval", type=float, default=15.0,
                   help="seconds between readings of the running count (sinfo)")
    p.add_argument("--queued-check-interval", type=float, default=60.0,
                   help="seconds between counts of the queue (squeue: a full job list)")
    p.add_argument("--queue-partition", default="queue")
    p.add_argument("--batch-partition", default="batch")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--fill-only", action="store_true", help="fill the queue and exit")
    mode.add_argument("--cancel-all", action="store_true",
                      help="cancel every job of this generator (by name) and exit")
    a = p.parse_args(argv)
    if not a.cancel_all and a.record is None:
        p.error("--record FILE is required (every submitted id is written there)")
    if a.churn <= 0 or a.running < 1 or a.workers < 1 or a.queued < 0:
        p.error("--churn, --running and --workers must be positive, --queued not negative")

    load = Load(a.prefix, None if a.cancel_all else a.record, workers=a.workers,
                queue_partition=a.queue_partition, batch_partition=a.batch_partition,
                held=a.held)
    try:
        if a.cancel_all:
            load.cancel_all()
            return 0
        summary: dict = {"prefix": list(load.prefix), "record": str(a.record)}
        if a.queued:
            fill = load.fill(a.queued)
            summary["fill"] = {**asdict(fill), "rate": round(fill.rate, 1)}
            load.log(f"filled {fill.submitted} queued jobs in {fill.seconds:.1f} s "
                     f"({fill.rate:.0f} jobs/s)")
        if not a.fill_only:
            stop = threading.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: stop.set())
            res = load.churn(a.running, a.churn, a.duration, stop, hold_queued=a.queued,
                             check_interval=a.check_interval,
                             queued_check_interval=a.queued_check_interval)
            summary["churn"] = res.summary()
        json.dump(summary, sys.stdout, indent=1)
        print()
        fill_ok = summary.get("fill", {}).get("submitted", a.queued) >= a.queued
        return 0 if fill_ok else 1
    finally:
        load.close()


if __name__ == "__main__":
    sys.exit(main())
