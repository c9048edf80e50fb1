"""The real-time soak (issue 37, item 5): hours of wall-clock time on the real 22.05 test-bed
cluster, with a steady churn of jobs (tests/integration/faults.py's mix: short, long,
failing, multi-node, cancelled, array and GPU jobs, each through PrologSlurmctld's hook and
the poll), delivered to the real cc-backend 1.5.4 (its commit worker at its default, 2 min)
through the fault proxy, which injects a random fault now and then (503s, hangs, dropped
connections, slow answers). Every minute the daemon's figures (tests/bench/vitals.py) are
kept; at the end every run Slurm's accounting lists is compared with what cc-backend holds,
read through its API, and what NATS received (lost, duplicated, wrong: 0 expected).

What a simulated clock hides, this shows: threads, sockets, sessions and sleeps that live in
real time. The results file is written every minute (``"finished": false`` until the count),
so a run cut short still says how far it got.

    flock /tmp/ccadapter-integration.lock .venv/bin/python -m tests.bench.soak --hours 2
"""

from __future__ import annotations

import argparse
import calendar
import json
import random
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccadapter.config.views import OUTBOX_FILE
from ccadapter.runtime.lastrun import LastRun
from tests.bench import results, vitals
from tests.bench.life import replot
from tests.ccbackend import CcBackend
from tests.integration.faults import (
    GPU_DIR,
    Churn,
    Rig,
    _count,
    _wait_settled,
)
from tests.integration.sync_scenario import DaemonProc, cluster_root, write_config
from tests.integration.workload import (
    AllocationWatcher,
    reported_gpus,
    testbed_clusters,
    with_reported_gpus,
)
from tests.natsserver import NatsServer, add_stream

RECEIVER = "cc-backend 1.5.4"
# (name, shortest, longest seconds): what the fault proxy can do to cc-backend's answers
FAULTS = (("503", 20, 120), ("hang", 20, 90), ("drop", 10, 60), ("slow", 30, 120))
FAULT_CHANCE = 0.3  # per minute


@dataclass(eq=False)  # a thread: hashed by identity
class Faults(threading.Thread):
    """Each minute, with :data:`FAULT_CHANCE`, one random proxy fault for a random time."""

    cc: CcBackend
    rng: random.Random
    stopping: threading.Event = field(default_factory=threading.Event)
    active: str = ""
    done: list[dict[str, Any]] = field(default_factory=list)
    t0: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        super().__init__(name="faults", daemon=True)

    def run(self) -> None:
        while not self.stopping.wait(60):
            if self.rng.random() >= FAULT_CHANCE:
                continue
            name, low, high = self.rng.choice(FAULTS)
            seconds = self.rng.uniform(low, high)
            self.active = name
            started = time.time()
            self._set(name, True)
            self.stopping.wait(seconds)
            self._set(name, False)
            self.active = ""
            self.done.append({"fault": name, "at_min": round((started - self.t0) / 60, 1),
                              "seconds": round(time.time() - started, 1)})

    def _set(self, name: str, on: bool) -> None:
        if name == "503":
            self.cc.fail_with(503 if on else None)
        elif name == "hang":
            self.cc.hang(3600 if on else None)
        elif name == "drop":
            self.cc.drop_connections(on)
        else:
            self.cc.latency(2.0 if on else 0.0)


def soak(hours: float, version: str, interval: float, seed: int, out: Path) -> dict[str, Any]:
    cluster = next(c for c in testbed_clusters() if c.short == version)
    t0 = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="ccadapter-soak-"))
    minutes: list[dict[str, Any]] = []
    plan = {"hours": hours, "slurm": cluster.version, "churn_interval_s": interval,
            "seed": seed, "fault_chance_per_minute": FAULT_CHANCE,
            "faults": [f[0] for f in FAULTS], "commit_interval": "cc-backend default (2m)"}
    command = results.command_line("tests.bench.soak", lock=True)

    def save(data: dict[str, Any]) -> None:
        results.write("soak", command=command, receiver=RECEIVER, plan=plan, data=data,
                      took_s=time.time() - t0, directory=out)

    with CcBackend(tmp / "cc-backend", [cluster], commit_interval=None) as cc:
        nats = NatsServer(tmp / "nats").start()
        add_stream(nats.url)
        state = tmp / "state"
        cfg = write_config(cluster, cc, tmp, stateDirectory=str(state),
                           lastRunPath=str(state / "lastrun"), slurmPollInterval=30,
                           prepSockListenPath=cluster.hook_socket, natsServer="127.0.0.1",
                           natsPort=nats.port, natsJetStream=True, natsPublishTimeout=3)
        state.mkdir(parents=True, exist_ok=True)
        LastRun(state / "lastrun").set(time.time() - 5)
        daemon = DaemonProc(cfg, tmp / "daemon.log")
        rig = Rig(cluster, tmp, cc, nats, daemon, state)
        watcher = AllocationWatcher(cluster)
        watcher.start()
        daemon.start()
        gpu_dir = Path(cluster_root(cluster), GPU_DIR.lstrip("/"), cluster.name)
        shutil.rmtree(gpu_dir, ignore_errors=True)
        gpu_dir.mkdir(parents=True)
        churn = Churn(cluster, interval, Path(GPU_DIR, cluster.name))
        churn.phase = "soak"
        faults = Faults(cc, random.Random(seed))
        assert daemon.proc is not None
        try:
            churn.start()
            faults.start()
            end = t0 + hours * 3600
            minute = 0
            while time.time() < end:
                time.sleep(max(0.0, t0 + 60 * (minute + 1) - time.time()))
                minute += 1
                figures = vitals.read(daemon.proc.pid, state / OUTBOX_FILE, daemon.log)
                minutes.append({"minute": minute, **figures.as_dict(),
                                "fault": faults.active, "submitted": churn.total()})
                save({"finished": False, "minutes": minutes, "faults": faults.done})
            faults.stopping.set()
            faults.join(200)
            churn.stopping.set()
            churn.join(60)
            _wait_settled(rig, churn.tasks)
        finally:
            faults.stopping.set()
            churn.stopping.set()
            watcher.stop()
            exit_code = daemon.terminate() if daemon.proc.poll() is None else None
            # kept before the count, which cc-backend's API can fail (--recount reads it)
            save({"finished": False, "minutes": minutes, "faults": faults.done,
                  "exit_code": exit_code})
            allocs = with_reported_gpus(watcher.allocations(), reported_gpus(gpu_dir))
            tallies = _count(rig, churn, [("soak", hours * 3600)], allocs)
            nats.stop()
            shutil.rmtree(gpu_dir, ignore_errors=True)
        # runs cc-backend holds that Slurm never had are counted under "normal"
        extra = tallies.pop("normal", None)
        tally = tallies["soak"]
        data: dict[str, Any] = {"finished": True, "hours": hours, "jobs": tally.jobs,
                "lost": tally.lost + tally.nats_lost,
                "duplicated": tally.duplicated + tally.nats_duplicated
                + (extra.duplicated if extra else 0),
                "wrong": tally.wrong + tally.nats_wrong, "tally": tally.as_dict(),
                "submitted": churn.total(), "exit_code": exit_code, "minutes": minutes,
                "faults": faults.done, "token_in_log": cc.token in rig.log_text()}
        data["plot"] = _plot(data, out)
        save(data)
    shutil.rmtree(tmp, ignore_errors=True)
    return data


def _plot(data: dict[str, Any], out: Path) -> str:
    from tests.bench.life_plot import plot  # the bench extra's matplotlib
    return plot(data["minutes"], "minute", "minute", out / "soak.png",
                log_label="log lines so far")


def recount(kept: Path, out: Path, version: str) -> dict[str, Any]:
    """Count a soak whose own count could not read cc-backend's API (its stop/commit race
    can leave ``GET /api/jobs/`` answering 500 for good): every run of the soak's jobs
    (named ``f<kind>`` by the churn, submitted while it ran) that sacct lists, against the
    rows of cc-backend's database kept in ``kept`` (the soak's directory): each run held
    once, with Slurm's state, length and hosts. NATS and the CPU and GPU ids (read by the
    soak while it ran) are not counted again."""
    import sqlite3

    from tests.integration.expect import CC_STATE, ran
    from tests.integration.workload import sacct_truth

    doc = results.load("soak", out)
    assert doc is not None
    cluster = next(c for c in testbed_clusters() if c.short == version)
    end = calendar.timegm(time.strptime(doc["date"], "%Y-%m-%dT%H:%M:%SZ"))
    begin = end - doc["took_s"]
    names = {f"f{kind}" for kind in Churn.MIX}
    listing = cluster.run("sacct", "-X", "-n", "-P", "--allusers", "--duplicates", "-S",
                          time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(begin)), "-E",
                          time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(end)), "-o",
                          "JobIDRaw,JobName,Submit")
    ids = sorted({int(raw) for raw, name, *_ in (ln.split("|") for ln in listing.splitlines())
                  if raw.isdigit() and name in names})
    truth = {}
    for i in range(0, len(ids), 500):
        truth.update(sacct_truth(cluster, ids[i:i + 500]))
    db = sqlite3.connect(f"file:{kept / 'cc-backend' / 'var' / 'job.db'}?mode=ro", uri=True)
    rows = db.execute("SELECT job_id, start_time, duration, job_state, resources FROM job "
                      "WHERE cluster = ? UNION ALL SELECT job_id, start_time, duration, "
                      "job_state, resources FROM job_cache WHERE cluster = ?",
                      (cluster.name, cluster.name)).fetchall()
    db.close()
    held: dict[tuple[int, int], list[tuple]] = {}
    for job_id, start, duration, state, resources in rows:
        held.setdefault((job_id, start), []).append((duration, state, json.loads(resources)))
    lost = duplicated = wrong = runs = 0
    problems: list[str] = []
    for job_id, t in sorted(truth.items()):
        if not ran(t) or t["het_offset"]:
            continue
        runs += 1
        got = held.get((job_id, t["start"]), [])
        if not got:
            lost += 1
            problems.append(f"job {job_id}: not held")
            continue
        duplicated += len(got) > 1
        duration, state, resources = got[0]
        hosts = tuple(r.get("hostname") for r in resources)
        want = (t["end"] - t["start"], CC_STATE.get(t["state"], t["state"]), t["nodes"])
        if state == "running" or (duration, state, hosts) != want:
            wrong += 1
            problems.append(f"job {job_id}: held {(duration, state, hosts)}, Slurm {want}")
    data = doc["data"]
    data.update(finished=True, hours=doc["plan"]["hours"], jobs=runs, lost=lost,
                duplicated=duplicated, wrong=wrong, submitted=len(ids),
                exit_code=data.get("exit_code", _exit_in_log(kept)),
                problems=problems[:30], token_in_log=False,
                counted="again from cc-backend's kept database: its API answered 500 "
                        "(its stop/commit race); NATS, CPU and GPU ids not counted")
    data["token_in_log"] = _token_in_log(kept)
    results.write("soak", command=doc["command"], receiver=doc["receiver"], plan=doc["plan"],
                  data=data, took_s=doc["took_s"], directory=out, when=end,
                  machine_info=doc["machine"])
    return data


def _exit_in_log(kept: Path) -> int | None:
    """A soak counted before its exit code was kept: 0 where the daemon's log ends with its
    clean stop (its SIGTERM handled), else unknown."""
    lines = (kept / "daemon.log").read_text(errors="replace").splitlines()
    return 0 if lines and lines[-1].endswith("ccadapter: stopped") else None


def _token_in_log(kept: Path) -> bool:
    tokens = json.loads((kept / "cc-backend" / "tokens.json").read_text())
    return tokens["token"] in (kept / "daemon.log").read_text(errors="replace")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--version", default="22.05")
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between sbatch")
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--out", type=Path, default=results.RESULTS)
    ap.add_argument("--recount", type=Path, default=None, metavar="KEPT",
                    help="count again from a soak's directory (its cc-backend's database)")
    ap.add_argument("--replot", action="store_true",
                    help="only draw the plot of the results file there (a run before plots)")
    args = ap.parse_args(argv)
    if args.recount:
        data = recount(args.recount, args.out, args.version)
        print({k: data[k] for k in ("jobs", "lost", "duplicated", "wrong")}, data["problems"])
        return
    if args.replot:
        replot("soak", args.out, "minutes", "minute", "minute", "log lines so far")
        return
    data = soak(args.hours, args.version, args.interval, args.seed, args.out)
    print({k: data[k] for k in ("hours", "jobs", "lost", "duplicated", "wrong", "exit_code")})


if __name__ == "__main__":
    main()
