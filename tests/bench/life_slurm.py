"""The simulated Slurm of the month-of-life run: answers the daemon's Slurm commands by the
site clock (tests/bench/simclock.py) from the workload (tests/bench/life_workload.py), in a
process of its own, so that the daemon's memory and CPU are its own.

Every answer is printed the way Slurm 22.05 prints it: the records of the test bed's recorded
workload (tests/fixtures/22.05/testbed/) with this run's ids, times and states, filtered by
:class:`tests.fakeslurm.RecordedSlurm`'s rules of sacct's windows, slurmctld's text and
squeue's steps. slurmctld holds a job while it is queued or runs and for MinJobAge (300 s)
after it ended. slurmctld also sends the Prolog/Epilog hook of the hooked runs to the
daemon's socket at their start and end, through the hook's own code (the message slurmctld
writes, with this run's variables).

The daemon reaches it through tests.bench.life_daemon's ``RemoteRunner`` (its
``CommandRunner``), one UNIX socket connection per thread, a JSON line each way. The
driver switches incidents with ``set``:
``sacct_down`` (slurmdbd stopped), ``controller_down`` (slurmctld restarting), ``poison``
(job ids whose records break ``sacct --json``), ``broken`` (job ids whose record does not
parse: its time limit is not a number).

    python -m tests.bench.life_slurm --socket S --clock F --seed N --per-day N --days N \\
        --hook SPEC
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import socketserver
import threading
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ccadapter.errors import SlurmCommandError, TransientSlurmError
from ccadapter.prep.hook import build_message, send
from tests.bench.life_workload import Run, Workload
from tests.bench.simclock import SimClock
from tests.fakeslurm import RecordedSlurm

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "22.05" / "testbed"
MIN_JOB_AGE = 300
VERSION = "22.05"
# the recorded job of each kind (workload.json's names; ``cancelqueued``: 408)
RECORDED = {"complete": 395, "fail": 396, "multinode": 397, "gpujob": 398, "hetjob": 399,
            "arr": 406, "cancelrun": 403, "timeout": 404, "excl": 405, "cancelqueued": 408}
PENDING_TEXT = 403  # a queued job as slurmctld prints it (scontrol-d-busy.txt)
_TIMES = re.compile(r"\b(SubmitTime|EligibleTime|AccrueTime|StartTime|EndTime|"
                    r"LastSchedEval)=(\S+)")


def _wall(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S")


class Templates:
    """The recorded records of each kind: sacct's JSON and slurmctld's text."""

    def __init__(self) -> None:
        window = json.loads((FIXTURES / "sacct-window.json").read_text())
        self.meta = {k: v for k, v in window.items() if k != "jobs"}
        by_id = {r["job_id"]: r for r in window["jobs"]}
        self.records = {kind: by_id[i] for kind, i in RECORDED.items()}
        self.records["hetjob1"] = by_id[400]
        final = _texts((FIXTURES / "scontrol-d-final.txt").read_text())
        busy = _texts((FIXTURES / "scontrol-d-busy.txt").read_text())
        self.texts = {kind: final[i] for kind, i in RECORDED.items()}
        self.texts["hetjob1"] = final[400]
        self.texts["gpujob"] = busy[398]  # while it runs: its GPU's index
        self.pending = busy[PENDING_TEXT]
        commands = json.loads((FIXTURES / "commands-busy.json").read_text())["commands"]
        self.config = next(c["stdout"] for c in commands
                           if c["argv"] == ["scontrol", "show", "config"])
        self.nodes = next(c["stdout"] for c in commands if c["argv"][-3:] == ["-o", "show",
                                                                               "node"])
        self.cluster = window["jobs"][0]["cluster"]

    def record(self, run: Run, now: float, broken: bool) -> dict[str, Any]:
        key = "hetjob1" if run.kind == "hetjob" and run.het_offset == 1 else run.kind
        r = copy.deepcopy(self.records[key])
        state = run.state_at(now)
        started = bool(run.start) and now >= run.start
        ended = now >= run.end
        r["job_id"] = run.job_id
        if run.array_job_id:
            r["array"]["job_id"], r["array"]["task_id"] = run.array_job_id, run.array_task
        if run.het_leader:
            r["het"] = {"job_id": run.het_leader, "job_offset": run.het_offset}
        t = r["time"]
        t["submission"] = run.submit
        t["eligible"] = run.eligible or run.submit
        if run.limit_min:
            t["limit"] = run.limit_min
        if run.kind == "cancelqueued":
            t["start"] = run.end if ended else 0
            t["end"] = run.end if ended else 0
            t["elapsed"] = 0
        else:
            t["start"] = run.start if started else 0
            t["end"] = run.end if ended else 0
            t["elapsed"] = int(min(now, run.end) - run.start) if started else 0
        if not started:
            r["nodes"] = "None assigned"
            r["steps"] = []
        for step in r.get("steps", []):
            step["step"]["job_id"] = run.job_id
            step["time"].update(start=t["start"], end=t["end"], elapsed=t["elapsed"])
        r["state"] = {"current": state, "reason": "None"}
        if broken:
            t["limit"] = "forever"  # not a number: the record does not read
        return r

    def text(self, run: Run, now: float) -> str:
        """``scontrol show job -d`` of a job slurmctld holds at ``now``."""
        state = run.state_at(now)
        if state == "PENDING" or not run.start:
            text = self.pending
            text = re.sub(r"JobName=\S+", f"JobName={self.records[run.kind]['name']}", text)
            start = end = None
        else:
            key = "hetjob1" if run.kind == "hetjob" and run.het_offset == 1 else run.kind
            text = self.texts[key]
            start, end = run.start, run.end if now >= run.end else run.start + 365 * 86400
        head, _, rest = text.partition("\n")
        head = f"JobId={run.job_id}"
        if run.array_job_id:
            head += f" ArrayJobId={run.array_job_id} ArrayTaskId={run.array_task}"
        if run.het_leader:
            head += f" HetJobId={run.het_leader} HetJobOffset={run.het_offset}"
        head += " JobName=" + self.records[run.kind]["name"]
        text = head + "\n" + rest
        text = re.sub(r"JobState=\S+", f"JobState={state}", text)
        times = {"SubmitTime": run.submit, "EligibleTime": run.eligible or run.submit,
                 "AccrueTime": run.submit, "LastSchedEval": start or run.submit,
                 "StartTime": start, "EndTime": end}

        def put(m: re.Match[str]) -> str:
            value = times[m[1]]
            return f"{m[1]}={_wall(value) if value else 'Unknown'}"

        return _TIMES.sub(put, text)


def _texts(text: str) -> dict[int, str]:
    out = {}
    for record in text.split("\n\n"):
        record = record.strip("\n")
        if record.startswith("JobId="):
            out[int(record[6:].split(" ", 1)[0])] = record
    return out


class LifeSlurm:
    """Slurm's answers at the site clock's now."""

    def __init__(self, workload: Workload, clock: SimClock) -> None:
        self.workload = workload
        self.clock = clock
        self.templates = Templates()
        self.sacct_down = False
        self.controller_down = False
        self.poison: set[int] = set()
        self.broken: set[int] = set()
        self.asked: dict[str, int] = {}
        self._lock = threading.Lock()

    def _visible(self, now: float, since: float) -> list[Run]:
        """Runs slurmdbd lists for windows from ``since``: ended since then, or not ended
        and submitted by now."""
        w = self.workload
        out = list(w.ended_between(since, now))
        seen = {id(r) for r in out}
        # runs submitted by now that have not ended: scan back from the newest submission
        # to the longest a run may take (30 h runs, 25 h requeue gaps, 5 min queueing)
        upto = w.submitted_by(now)
        floor = now - 3 * 86400
        i = upto - 1
        while i >= 0 and w.by_submit[i].submit >= floor:
            r = w.by_submit[i]
            if r.end > now and id(r) not in seen:
                out.append(r)
            i -= 1
        return out

    def _records(self, argv: Sequence[str], now: float) -> list[dict[str, Any]]:
        """sacct's records a command may print (RecordedSlurm filters them as sacct does)."""
        argv = list(argv)
        if "--jobs" in argv:
            ids = [int(i) for i in argv[argv.index("--jobs") + 1].split(",")]
            runs = [r for i in ids for r in self.workload.by_id.get(i, [])]
            runs += [c for i in ids for c in self.workload.het_components(i) if c.job_id != i]
            runs = [r for r in runs if r.submit <= now]
        else:
            since = now - 86400 * 8
            if "--starttime" in argv:  # the daemon runs sacct with TZ=UTC0
                since = datetime.strptime(argv[argv.index("--starttime") + 1],
                                          "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
            runs = self._visible(now, since - 60)
        return [self.templates.record(r, now, r.job_id in self.broken) for r in runs]

    def _held(self, now: float, ids: set[int] | None = None, running: bool = False) -> str:
        """slurmctld's text of the jobs it holds (of ``ids`` only; only those running)."""
        if ids is not None:
            runs = [r for i in ids for r in self.workload.by_id.get(i, [])]
            runs += [c for i in ids for c in self.workload.het_components(i) if c.job_id != i]
        else:
            runs = self._visible(now, now - MIN_JOB_AGE)
        held = {}
        for r in runs:  # a requeued job: its latest run that began by now
            if r.submit <= now and r.end > now - MIN_JOB_AGE and \
                    (not running or r.state_at(now) == "RUNNING") and \
                    (r.job_id not in held or (r.start and r.start <= now)):
                held[r.job_id] = r
        return "\n\n".join(self.templates.text(r, now) for r in held.values())

    def _slurm(self, records: list[dict[str, Any]], text: str, now: float) -> RecordedSlurm:
        slurm = RecordedSlurm(VERSION, {**self.templates.meta, "jobs": records}, text,
                              nodes=self.templates.nodes, clock=lambda: now)
        slurm.sacct_down = self.sacct_down
        slurm.controller_down = self.controller_down
        slurm.poison = self.poison
        return slurm

    def call(self, method: str, argv: list[str], env: dict[str, str] | None,
             stdin: str | None) -> Any:
        now = self.clock.site()
        with self._lock:
            self.asked[argv[0]] = self.asked.get(argv[0], 0) + 1
        if method == "run":
            if argv[-2:] == ["show", "config"]:
                if self.controller_down:
                    raise TransientSlurmError(argv, "exit code 1",
                                              "Unable to contact slurm controller")
                return self.templates.config
            if argv[0] == "sacct":
                return self._slurm(self._records(argv, now), "", now).run(argv, env=env)
            if argv[0] == "squeue":
                return self._slurm([], self._held(now, running=True), now).run(argv, env=env)
            return self._slurm([], "", now).run(argv, env=env)
        if method in ("unchecked", "ask"):
            ids = {int(w[2]) for w in (ln.split() for ln in (stdin or "").splitlines())
                   if len(w) > 2 and w[0] in ("show", "write") and w[2].isdigit()}
            done = self._slurm([], self._held(now, ids), now).unchecked(argv, stdin=stdin,
                                                                         env=env)
            return [done.stdout, done.stderr, done.returncode]
        if method == "lines":
            return "".join(self._slurm([], self._held(now), now).lines(argv, env=env))
        raise ValueError(f"unknown method {method}")

    def set(self, key: str, value: Any) -> None:
        if key in ("poison", "broken"):
            setattr(self, key, set(value))
        else:
            setattr(self, key, bool(value))


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        for line in self.rfile:
            req = json.loads(line)
            try:
                if req["m"] == "set":
                    self.server.slurm.set(req["key"], req["value"])
                    out: dict[str, Any] = {"ok": None}
                elif req["m"] == "asked":
                    out = {"ok": self.server.slurm.asked}
                else:
                    out = {"ok": self.server.slurm.call(req["m"], req["argv"], req.get("env"),
                                                        req.get("stdin"))}
            except SlurmCommandError as exc:
                kind = "transient" if isinstance(exc, TransientSlurmError) else "command"
                out = {"err": [kind, exc.argv, str(exc), exc.stderr]}
            except Exception as exc:  # a command the simulation does not know: said
                traceback.print_exc()
                out = {"err": ["command", req.get("argv", []), f"simulation: {exc!r}", ""]}
            self.wfile.write(json.dumps(out).encode() + b"\n")
            self.wfile.flush()


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    slurm: LifeSlurm


def hook_env(run: Run, context: str, cluster: str) -> dict[str, str]:
    """The variables slurmctld gives PrologSlurmctld/EpilogSlurmctld (as recorded in
    hook-hetjob.json), for this run."""
    env = {"SLURM_JOB_ID": str(run.job_id), "SLURM_JOBID": str(run.job_id),
           "SLURM_SCRIPT_CONTEXT": context, "SLURM_CLUSTER_NAME": cluster,
           "SLURM_JOB_USER": "root", "SLURM_JOB_UID": "0", "SLURM_JOB_ACCOUNT": "root",
           "SLURM_JOB_RESTART_COUNT": "0"}
    if run.het_leader:
        env.update(SLURM_HET_JOB_ID=str(run.het_leader), SLURM_HET_JOB_OFFSET=str(run.het_offset))
    if run.array_job_id:
        env.update(SLURM_ARRAY_JOB_ID=str(run.array_job_id),
                   SLURM_ARRAY_TASK_ID=str(run.array_task))
    return env


class HookSender(threading.Thread):
    """slurmctld's PrologSlurmctld/EpilogSlurmctld: each hooked run's start and end sent to
    the daemon's socket when the site clock reaches it (not while slurmctld is down)."""

    def __init__(self, slurm: LifeSlurm, spec: str) -> None:
        super().__init__(name="hooks", daemon=True)
        self.slurm, self.spec = slurm, spec
        self.sent = self.failed = 0

    def run(self) -> None:
        clock, cluster = self.slurm.clock, self.slurm.templates.cluster
        for when, context, run in self.slurm.workload.events():
            clock.sleep_until(when)
            if self.slurm.controller_down:
                continue
            try:
                send(self.spec, build_message(hook_env(run, context, cluster)),
                     time.monotonic() + 1.0)
                self.sent += 1
            except OSError:
                self.failed += 1  # the daemon is down: the poll finds the job


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--clock", type=Path, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--per-day", type=int, required=True)
    ap.add_argument("--days", type=float, required=True)
    ap.add_argument("--t0", type=float, required=True)
    ap.add_argument("--hook", default="")
    args = ap.parse_args(argv)
    clock = SimClock(args.clock)
    workload = Workload(args.seed, args.per_day, args.days, args.t0)
    slurm = LifeSlurm(workload, clock)
    server = _Server(args.socket, _Handler)
    server.slurm = slurm
    if args.hook:
        HookSender(slurm, args.hook).start()
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
