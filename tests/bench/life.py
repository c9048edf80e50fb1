"""A month of a site's life (issue 37): the daemon, configured as the README deploys it,
serves 30 days of a site's Slurm at thousands of jobs a day, with an incident on a fixed
day, delivering to the real cc-backend 1.5.4; then every run Slurm ran is looked up in what
cc-backend holds, through its API.

What is real: the daemon (``ccadapter daemon``'s own command, tests/bench/life_daemon.py),
its config file, outbox, lastRun and state disk (a small tmpfs, filled for the disk
incident), its hook socket and the hook's own sending code, signals, and cc-backend 1.5.4
(killed, restarted, re-keyed for real). What is simulated: the site's clock, ``--factor``
times faster than real time (tests/bench/simclock.py; the daemon's clock, its routines'
pacing and waits follow it, I/O timeouts stay real), and Slurm (tests/bench/life_slurm.py:
22.05's recorded records and texts printed with the workload's ids and times, answering by
the site clock). cc-backend's commit worker runs on real time: its default (2 min) is
``2 min × factor`` of site time; ``--commit 1s`` commits every real second, which makes
its stop/commit race as likely as it gets.

    .venv/bin/python -m tests.bench.life --days 30 --per-day 5000           # the month
    .venv/bin/python -m tests.bench.life --days 30 --per-day 5000 --commit 1s --name life-commit
    .venv/bin/python -m tests.bench.life --short                            # tests/run's

Results: ``tests/bench/results/<name>.json`` (``life`` by default), rendered into
BENCHMARKS.md with its plot (tests/bench/render_life.py).
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccadapter.config.views import OUTBOX_FILE
from ccadapter.runtime.lastrun import LastRun
from tests.bench import results, vitals
from tests.bench.life_check import Verdict, astray, check, stray_stops
from tests.bench.life_incidents import BASELINE, INCIDENT_ACTIONS, INCIDENTS, write_secret
from tests.bench.life_workload import DAY, Workload
from tests.bench.simclock import SimClock
from tests.ccbackend import CcBackend, CcBackendError, Nodes
from tests.integration.faults import small_tmpfs

CLUSTER = "cluster22"
NODES = Nodes(("n1", "n2"), ("n1",), 4)
RECOVERY_LIMIT = DAY  # site seconds an incident may take to recover from
SETTLE = 900  # site seconds after the last run ended before cc-backend is read


@dataclass
class Plan:
    days: float = 30.0
    per_day: int = 5000
    factor: float = 1440.0
    commit: str | None = None  # cc-backend's commit-job-worker (None: its default)
    seed: int = 37
    first_incident: float = 2.4  # day of the first incident
    incident_every: float = 2.0  # days between incidents

    def incident_days(self) -> list[tuple[str, float]]:
        """Each incident's day; first a quiet moment, measured the same way: how long the
        daemon takes to "recover" when nothing happened (a poll and the window's lag)."""
        quiet = (BASELINE, self.first_incident - self.incident_every / 2)
        return [quiet] + [(name, self.first_incident + i * self.incident_every)
                          for i, name in enumerate(INCIDENTS)]


@dataclass
class Daemon:
    """The daemon's process, started and stopped as systemd would."""

    tmp: Path
    config: Path
    clock_file: Path
    slurm_socket: Path
    log: Path
    proc: subprocess.Popen | None = None
    starts: int = 0

    def start(self) -> None:
        with self.log.open("a") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.bench.life_daemon", "--config", str(self.config),
                 "--clock", str(self.clock_file), "--slurm", str(self.slurm_socket),
                 "--log-level", os.environ.get("CCADAPTER_LIFE_LOG_LEVEL", "info")],
                stdout=fh, stderr=fh, stdin=subprocess.DEVNULL)
        self.starts += 1

    def wait_serving(self, lines_before: int, timeout: float = 60) -> None:
        until = time.time() + timeout
        while time.time() < until:
            text = self.log.read_text(errors="replace").splitlines()[lines_before:]
            if any("listening for Prolog/Epilog" in ln for ln in text):
                return
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError("daemon exited: " + "\n".join(text[-20:]))
            time.sleep(0.02)
        raise TimeoutError("daemon did not start")

    def signal(self, sig: int, timeout: float = 120) -> tuple[int, float]:
        """Send ``sig``; (exit code, real seconds until it exited)."""
        assert self.proc is not None
        t0 = time.time()
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        return code, time.time() - t0


@dataclass
class Life:
    plan: Plan
    tmp: Path
    cc: CcBackend
    clock: SimClock
    daemon: Daemon
    state: Path
    jwt_file: Path
    slurm_socket: Path
    t0: float
    workload: Workload
    incidents: list[dict[str, Any]] = field(default_factory=list)
    poisoned: int = 0  # the job whose record breaks sacct --json
    broken: int = 0  # the job whose record does not parse
    busy: threading.Event = field(default_factory=threading.Event)  # an incident runs

    # --- what the daemon is up to ----------------------------------------------------------

    def pending(self) -> int:
        return vitals.pending(self.state / OUTBOX_FILE)

    def last_run(self) -> float:
        return LastRun(self.state / "lastrun").get() or 0.0

    def slurm(self, key: str, value: Any) -> None:
        from tests.bench.life_daemon import RemoteRunner
        runner = RemoteRunner(str(self.slurm_socket))
        try:
            runner.set(key, value)
        finally:
            runner.close()

    def wait_recovered(self, since: float, limit: float = RECOVERY_LIMIT) -> float | None:
        """Seconds of the daemon's clock from ``since`` until its outbox is empty and
        lastRun has passed ``since`` (None: not within ``limit``). lastRun is written by
        the daemon's clock, so both are read on it (the clock-step incident moves it)."""
        until = since + limit
        while self.clock.now() < until:
            if self.last_run() >= since and self.pending() == 0:
                return round(self.clock.now() - since)
            time.sleep(0.02)
        return None

    def log_lines(self) -> list[str]:
        return self.daemon.log.read_text(errors="replace").splitlines()

    # --- the incidents -----------------------------------------------------------------------

    def run_incident(self, name: str, day: float) -> None:
        self.clock.sleep_until(self.t0 + day * DAY)
        self.busy.set()
        before = len(self.log_lines())
        started = self.clock.site()
        record: dict[str, Any] = {"name": name, "day": round(day, 2)}
        try:
            record.update(INCIDENT_ACTIONS[name](self))
        except Exception as exc:  # the incident itself failed: said in the results
            record["error"] = f"{type(exc).__name__}: {exc}"
        ended = self.clock.site()
        recovery = self.wait_recovered(self.clock.now())
        said = [ln for ln in self.log_lines()[before:] if ln.startswith(("WARNING", "ERROR"))]
        record.update(lasted_s=round(ended - started), recovery_s=recovery,
                      recovered=recovery is not None and "error" not in record,
                      daemon_said=_distinct(said)[:6], warning_lines=len(said))
        self.incidents.append(record)
        self.busy.clear()

    def hold(self, site_seconds: float) -> None:
        self.clock.sleep_until(self.clock.site() + site_seconds)

    def restart_daemon(self, sig: int, downtime: float) -> dict[str, Any]:
        """Stop the daemon, let ``downtime`` site seconds pass, start it (a catch-up of that
        long), and hit it with ``sig`` while it catches up; then start it again."""
        code, _ = self.daemon.signal(signal.SIGTERM)
        self.hold(downtime)
        behind = self.clock.site() - self.last_run()
        lines = len(self.log_lines())
        self.daemon.start()
        self.daemon.wait_serving(lines)
        caught_up_before = self.last_run() >= self.clock.site() - 600
        hit_code, took = self.daemon.signal(sig)
        self.daemon.start()
        self.daemon.wait_serving(lines)
        name = signal.Signals(sig).name
        return {"did": f"stopped for {downtime / 3600:.0f} h, started ({behind / 3600:.1f} h "
                       f"behind), {name} while it caught up (exit {hit_code} after {took:.2f} "
                       "s), started again",
                "behind_s": round(behind), "signal": name,
                "exit_code": hit_code, "exit_real_s": round(took, 2),
                "first_exit_code": code, "catch_up_done_before_signal": caught_up_before}


def _distinct(lines: list[str]) -> list[str]:
    seen, out = set(), []
    for ln in lines:
        key = ln[:80]
        if key not in seen:
            seen.add(key)
            out.append(ln[:300])
    return out


# --- one life ---------------------------------------------------------------------------------

def live(plan: Plan, keep: Path | None = None) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="ccadapter-life-"))
    t0 = float(int(time.time()) - int((plan.days + 3) * DAY))  # all of it in the past
    workload = Workload(plan.seed, plan.per_day, plan.days, t0)
    last_end = max(r.end for r in workload.runs)
    real_t0 = time.time()
    with small_tmpfs(tmp / "state", "512m") as state, \
            CcBackend(tmp / "cc-backend", {CLUSTER: NODES}, commit_interval=plan.commit) as cc:
        (tmp / "run").mkdir()
        jwt = tmp / "etc" / "jwt"
        jwt.parent.mkdir()
        write_secret(jwt, cc.token)
        config = tmp / "etc" / "config.json"
        config.write_text(json.dumps({
            "pidFilePath": str(tmp / "run" / "daemon.pid"),
            "prepSockListenPath": str(tmp / "run" / "daemon.sock"),
            "lastRunPath": str(state / "lastrun"), "stateDirectory": str(state),
            "slurmPollInterval": 60, "slurmQueryMaxSpan": 604800, "ccPollInterval": 21600,
            "ccRestSubmitJobs": True, "ccRestUrl": cc.server_url, "ccRestJwtFile": str(jwt),
            "slurmCommandPrefix": [], "slurmCommandTimeout": 60}, indent=1))
        config.chmod(0o640)
        clock = SimClock.create(tmp / "clock", t0 - 600, plan.factor)
        LastRun(state / "lastrun").set(t0 - 600)
        slurm_socket = tmp / "slurm.sock"
        with (tmp / "slurm.log").open("w") as sim_log:
            sim = subprocess.Popen(
                [sys.executable, "-m", "tests.bench.life_slurm", "--socket", str(slurm_socket),
                 "--clock", str(clock.path), "--seed", str(plan.seed), "--per-day",
                 str(plan.per_day), "--days", str(plan.days), "--t0", str(t0), "--hook",
                 str(tmp / "run" / "daemon.sock")],
                stdout=subprocess.PIPE, stderr=sim_log, stdin=subprocess.DEVNULL, text=True)
        assert sim.stdout is not None
        with sim.stdout:
            assert sim.stdout.readline().strip() == "ready"
        daemon = Daemon(tmp, config, clock.path, slurm_socket, tmp / "daemon.log")
        life = Life(plan, tmp, cc, clock, daemon, state, jwt, slurm_socket, t0, workload)
        daemon.start()
        daemon.wait_serving(0)
        incidents = threading.Thread(target=lambda: [life.run_incident(n, d)
                                                     for n, d in plan.incident_days()],
                                     daemon=True)
        incidents.start()
        days: list[dict[str, Any]] = []
        try:
            days = _sample_days(life, workload, last_end)
            incidents.join()
            clock.sleep_until(max(last_end, clock.site()) + SETTLE)
            recovered = life.wait_recovered(clock.now())
            code, took = daemon.signal(signal.SIGTERM)
            cc.wait_committed(600)
            jobs, read_from = held_jobs(cc)
            said = daemon.log.read_text(errors="replace")
            verdict = check(jobs, workload, life.poisoned, life.broken, astray(said),
                            stray_stops(said))
        finally:
            if daemon.proc and daemon.proc.poll() is None:
                daemon.proc.kill()
                daemon.proc.wait(30)
            sim.kill()
            sim.wait(30)
            if keep:  # what a person reads after a surprise: both logs, cc-backend's database
                shutil.copy(daemon.log, keep / "life-daemon.log")
                shutil.copy(cc.log_path, keep / "life-cc-backend.log")
                for part in ("job.db", "job.db-wal"):  # the server runs in WAL mode
                    if (cc.directory / "var" / part).exists():
                        shutil.copy(cc.directory / "var" / part, keep / f"life-{part}")
        token_logged = any(t in daemon.log.read_text() for t in (cc.token,))
    shutil.rmtree(tmp, ignore_errors=True)
    summary = _summary(plan, workload, days, life, verdict, recovered, code, took,
                       time.time() - real_t0, token_logged)
    summary.update(read_from=read_from, t0=t0)
    return summary


def held_jobs(cc: CcBackend) -> tuple[list[dict[str, Any]], str]:
    """Every job cc-backend holds, through its API; where the API cannot list them any
    more (cc-backend 1.5.4's stop/commit race writes a job's archive under another's path,
    and ``GET /api/jobs/`` answers 500 from then on: tests/ccbackend.py), from its database,
    and the results say so."""
    try:
        return cc.jobs(CLUSTER), "cc-backend's API (GET /api/jobs/)"
    except CcBackendError as exc:
        return (database_jobs(cc.directory / "var" / "job.db"),
                f"cc-backend's database: its API answered {exc}"[:300])


def database_jobs(path: Path) -> list[dict[str, Any]]:
    """The jobs of :data:`CLUSTER` in a cc-backend database (job table and job cache), as
    its API lists them, the fields the count reads."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT job_id, start_time, duration, job_state, array_job_id, "
                          "resources FROM job WHERE cluster = ? UNION ALL SELECT job_id, "
                          "start_time, duration, job_state, array_job_id, resources FROM "
                          "job_cache WHERE cluster = ?", (CLUSTER, CLUSTER)).fetchall()
    finally:
        db.close()
    return [{"jobId": r["job_id"], "startTime": r["start_time"], "duration": r["duration"],
             "jobState": r["job_state"], "arrayJobId": r["array_job_id"],
             "resources": json.loads(r["resources"])} for r in rows]


def _sample_days(life: Life, workload: Workload, last_end: float) -> list[dict[str, Any]]:
    """The daemon's figures at each site midnight, until the last run ended."""
    days: list[dict[str, Any]] = []
    before: vitals.Vitals | None = None
    day = 0
    incident_days = {int(d) for name, d in life.plan.incident_days() if name != BASELINE}
    while life.t0 + day * DAY < last_end + DAY:
        day += 1
        life.clock.sleep_until(life.t0 + day * DAY)
        while life.daemon.proc is None or life.daemon.proc.poll() is not None:
            time.sleep(0.05)  # between a stop and a start of an incident
        try:
            now = vitals.read(life.daemon.proc.pid, life.state / OUTBOX_FILE, life.daemon.log)
        except (OSError, RuntimeError):
            time.sleep(0.2)
            now = vitals.read(life.daemon.proc.pid, life.state / OUTBOX_FILE, life.daemon.log)
        entry = {"day": day, **now.as_dict(), "quiet": (day - 1) not in incident_days,
                 "daemon_starts": life.daemon.starts}
        # per day: what the daemon logged and used since the last midnight (a restart
        # starts its CPU count afresh: the day of one counts from its start)
        entry["log_lines"] = now.log_lines - (before.log_lines if before else 0)
        entry["log_lines_total"] = now.log_lines
        cpu_before = before.cpu_s if before and now.cpu_s >= before.cpu_s else 0.0
        entry["cpu_s"] = round(now.cpu_s - cpu_before, 2)
        entry["jobs_ended"] = len(workload.ended_between(life.t0 + (day - 1) * DAY,
                                                         life.t0 + day * DAY))
        days.append(entry)
        before = now
    return days


def _summary(plan: Plan, workload: Workload, days: list[dict[str, Any]], life: Life,
             verdict: Verdict, recovered: float | None, code: int, took: float,
             wall: float, token_logged: bool) -> dict[str, Any]:
    return {"simulated_days": round(len(days), 1), "jobs_submitted": int(plan.per_day
                                                                          * plan.days),
            "runs": len(workload.runs), "lost": verdict.lost, "duplicated": verdict.duplicated,
            "wrong": verdict.wrong, "exceptions": verdict.exceptions,
            "problems": verdict.problems[:30], "checked": verdict.checked,
            "days": days, "incidents": life.incidents, "settled": recovered is not None,
            "final_exit_code": code, "final_exit_real_s": round(took, 2),
            "real_seconds": round(wall), "token_in_log": token_logged,
            "daemon_starts": life.daemon.starts}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=float, default=30)
    ap.add_argument("--per-day", type=int, default=5000)
    ap.add_argument("--factor", type=float, default=1440)
    ap.add_argument("--commit", default=None, help="cc-backend's commit-job-worker")
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--short", action="store_true",
                    help="tests/run's version: 3 days, 600 jobs a day, every incident")
    ap.add_argument("--name", default="life")
    ap.add_argument("--out", type=Path, default=results.RESULTS)
    ap.add_argument("--keep", type=Path, default=None,
                    help="copy the daemon's log, cc-backend's log and database there")
    ap.add_argument("--recount", type=Path, default=None, metavar="KEPT",
                    help="count a results file again from what --keep kept (a run whose "
                         "count the checker has learned to read better since)")
    ap.add_argument("--replot", action="store_true",
                    help="only draw the plot of the results file there (a run before plots)")
    args = ap.parse_args(argv)
    if args.replot:
        replot(args.name, args.out, "days", "day", "site day")
        return
    if args.recount:
        recount(args.name, args.out, args.recount)
        return
    plan = short_plan() if args.short else Plan(args.days, args.per_day, args.factor,
                                                args.commit, args.seed)
    t0 = time.time()
    data = live(plan, args.keep)
    args.out.mkdir(parents=True, exist_ok=True)
    from tests.bench.life_plot import plot  # the bench extra's matplotlib
    data["plot"] = plot(data["days"], "day", "site day", args.out / f"{args.name}.png")
    results.write(args.name, command=results.command_line("tests.bench.life"),
                  receiver="cc-backend 1.5.4", plan=plan.__dict__, data=data,
                  took_s=time.time() - t0, directory=args.out)
    print(json.dumps({k: v for k, v in data.items() if k not in ("days", "incidents")},
                     indent=1))
    for inc in data["incidents"]:
        print(inc["day"], inc["name"], inc["recovery_s"], inc["recovered"], inc.get("error"))


def replot(name: str, out: Path, key: str, x: str, xlabel: str, log_label: str = "log lines"
           ) -> None:
    """Draw the plot of a results file written before its benchmark drew plots, and name
    it in the file (its measurement, date and machine unchanged)."""
    from tests.bench.life_plot import plot  # the bench extra's matplotlib
    doc = results.load(name, out)
    assert doc is not None, f"no results file {name} in {out}"
    doc["data"]["plot"] = plot(doc["data"][key], x, xlabel, out / f"{name}.png", log_label)
    when = calendar.timegm(time.strptime(doc["date"], "%Y-%m-%dT%H:%M:%SZ"))
    results.write(name, command=doc["command"], receiver=doc["receiver"], plan=doc["plan"],
                  data=doc["data"], took_s=doc["took_s"], directory=out, when=when,
                  machine_info=doc["machine"])


def recount(name: str, out: Path, kept: Path) -> None:
    """Count the runs of a results file again, with this checker, from cc-backend's
    database and the daemon's log that ``--keep`` kept; the rest of the file unchanged."""
    doc = results.load(name, out)
    assert doc is not None, f"no results file {name} in {out}"
    plan, data = doc["plan"], doc["data"]
    jobs = database_jobs(kept / "life-job.db")
    t0 = data.get("t0")
    if t0 is None:  # a file from before t0 was kept: the first job's start tells it
        first = Workload(plan["seed"], plan["per_day"], plan["days"], 0).by_id[1000][0]
        t0 = next(j["startTime"] for j in jobs if j["jobId"] == 1000) - first.start
    workload = Workload(plan["seed"], plan["per_day"], plan["days"], t0)
    poisoned, broken = (next((i.get("job", 0) for i in data["incidents"] if i["name"] == n), 0)
                        for n in ("a record that breaks sacct --json",
                                  "a record that does not parse"))
    said = (kept / "life-daemon.log").read_text(errors="replace")
    v = check(jobs, workload, poisoned, broken, astray(said), stray_stops(said))
    data.update(lost=v.lost, duplicated=v.duplicated, wrong=v.wrong, exceptions=v.exceptions,
                problems=v.problems[:30], checked=v.checked, t0=t0,
                read_from=f"cc-backend's database, kept and counted again ({data['read_from']})"
                [:300])
    when = calendar.timegm(time.strptime(doc["date"], "%Y-%m-%dT%H:%M:%SZ"))
    results.write(name, command=doc["command"], receiver=doc["receiver"], plan=plan,
                  data=data, took_s=doc["took_s"], directory=out, when=when,
                  machine_info=doc["machine"])


def short_plan() -> Plan:
    """Every incident within 3 site days at 600 jobs a day."""
    return Plan(days=3, per_day=600, factor=2880, commit=None, first_incident=0.3,
                incident_every=0.22)


if __name__ == "__main__":
    main()
