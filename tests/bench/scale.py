"""The scale benchmark (issue 11): ``ccadapter daemon`` beside a queue of 0, 10,000 and
50,000 pending jobs on clusterscale (128 nodes), while 500 jobs run and 5 jobs/s churn
through PrologSlurmctld/EpilogSlurmctld. (Memory with a long history, the 60,000-run
catch-up and the 30-day backfill, is tests.bench.scale_catchup.)

    flock /tmp/clusterscale.lock .venv/bin/python -m tests.bench.scale
    .venv/bin/python -m tests.bench.scale --sizes 0,2000 --duration 120   # a quick look

Per queue size, after a warm-up, over ``--duration`` seconds (600: "averaged over 10
minutes"): the daemon's CPU share of one core (its own and its Slurm commands', from
/proc), steady (median) and peak RSS (VmHWM, reset at the window's start), each
reconciler's wall, CPU, Slurm commands and bytes per cycle (the ``cost`` the daemon logs),
the start latency of the runs whose PrologSlurmctld ran in the window (from that moment and
from StartTime, to the stand-in's receipt), and the anchor's per-poll commands (sacct
window and squeue of all jobs, as JSON) on the same cluster at the same moment. At the
end every churn job sbatch accepted is counted against sacct: lost and duplicated. Before the
first window, slurmdbd's history of the cluster is grown to ``--history`` job records
(500,000: a site's months of history; tests.testbed.history), as some sacct questions cost
what the history holds.

Writes tests/bench/results/scale.json and scale.png (cost per cycle against queue size);
``python -m tests.bench.render`` puts them into BENCHMARKS.md. Takes about 45 minutes: the
fill to 50,000 is slurmctld-bound (95-170 jobs/s with the churn paused).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ccadapter.runtime.lastrun import LastRun
from tests.bench import results
from tests.bench.receivers import STANDIN
from tests.bench.scale_plot import plot
from tests.bench.scale_probe import (
    CYCLE_LINES,
    RssSampler,
    anchor_commands,
    cpu_seconds,
    cycles,
    listing_costs,
    per_reconciler,
    read_stamps,
    reset_peak,
    start_latency,
    status_mb,
)
from tests.integration.expect import by_run, lost_and_duplicated
from tests.integration.sync_scenario import TOKEN, DaemonProc, exactly_once, write_config
from tests.integration.workload import TESTBED, Cluster, sacct_truth
from tests.standin.ccbackend import START_PATH, CcBackendStandin
from tests.testbed import history
from tests.testbed.load import CHURN, QUEUED, Load

REPO = Path(__file__).resolve().parents[2]
POLL = 60  # slurmPollInterval: the default
CC_POLL = 300  # ccPollInterval: cc-cache twice per window (default 6 h: never seen here)
COMMIT = 120  # the stand-in's job cache commit interval (cc-backend's default, 2 min)
OVERLAP = 120  # slurmWindowOverlap: the default


def log(msg: str) -> None:
    print(f"[scale] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def bed_up(nodes: int) -> dict:
    """clusterscale with at least ``nodes`` nodes and ccadapter's hook; its info."""
    info = json.loads(subprocess.run([str(TESTBED), "info", "scale"], capture_output=True,
                                     text=True, check=True, stdin=subprocess.DEVNULL).stdout)
    if not info or len(info[0]["nodes"]) < nodes:
        log(f"bringing clusterscale up with {nodes} nodes")
        env = {**os.environ, "CCADAPTER_HOOK_PY": str(REPO / "ccadapter/prep/hook.py")}
        subprocess.run([str(TESTBED), "up", "scale", "--nodes", str(nodes)], check=True,
                       env=env, stdin=subprocess.DEVNULL)
        info = json.loads(subprocess.run([str(TESTBED), "info", "scale"], check=True,
                                         capture_output=True, text=True).stdout)
    return info[0]


class Churn:
    """``Load.churn`` in a thread, stopped and started around fills."""

    def __init__(self, load: Load, running: int, rate: float) -> None:
        self.load, self.running, self.rate = load, running, rate
        self.results: list[dict] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self, hold_queued: int) -> None:
        self._stop = threading.Event()

        def run() -> None:
            res = self.load.churn(self.running, self.rate, float("inf"), self._stop,
                                  hold_queued=hold_queued, check_interval=15.0)
            self.results.append(res.summary())
        self._thread = threading.Thread(target=run, name="churn", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(300)
            self._thread = None


def measure_level(level: int, pid: int, daemon_log: Path, duration: float,
                  prefix: tuple[str, ...], cluster: str, anchor_runs: int,
                  job_ids: list[int]) -> dict:
    """One window at this queue size (the churn runs)."""
    offset = daemon_log.stat().st_size
    reset_peak(pid)
    sampler = RssSampler(pid, log=daemon_log)
    sampler.start()
    t0, cpu0 = time.time(), cpu_seconds(pid)
    time.sleep(duration)
    t1, cpu1 = time.time(), cpu_seconds(pid)
    rss = sampler.stop()
    peak = status_mb(pid, "VmHWM")
    with daemon_log.open(errors="replace") as fh:
        fh.seek(offset)
        seen = cycles(fh.read())
    log(f"queue {level}: daemon CPU {100 * (cpu1 - cpu0) / (t1 - t0):.2f} % of a core, "
        f"RSS median {sorted(rss)[len(rss) // 2] if rss else 0:.1f} MB peak {peak:.1f} MB")
    anchor = anchor_commands(prefix, cluster, int(t1) - POLL, int(t1), anchor_runs)
    log(f"queue {level}: anchor sacct {anchor['sacct']['wall']} s "
        f"{anchor['sacct']['bytes']} B, squeue {anchor['squeue']['wall']} s "
        f"{anchor['squeue']['bytes']} B")
    listing = listing_costs(prefix, cluster, int(t1) - POLL, int(t1), anchor_runs, job_ids)
    log(f"queue {level}: listings " + ", ".join(f"{k} {v['wall']} s" for k, v in listing.items()))
    return {"queued": level, "t0": t0, "t1": t1, "cpu_s": round(cpu1 - cpu0, 3),
            "cpu_share": round((cpu1 - cpu0) / (t1 - t0), 5),
            "rss_samples_mb": [round(r, 1) for r in rss], "rss_peak_mb": round(peak, 1),
            "children_rss_mb": [round(r, 1) for r in sampler.children],
            "rss_steps": sampler.steps,
            "reconcilers": per_reconciler(seen), "cycle_summaries": len(seen),
            "anchor": anchor, "listing": listing}


def run_levels(args: argparse.Namespace, info: dict, tmp: Path) -> dict:
    cluster = Cluster(info["cluster"], info["version"], tuple(info["prefix"]),
                      tuple(info["nodes"]), info["gpu_node"])
    record = tmp / "submitted.jsonl"
    load = Load(cluster.prefix, record, workers=4)
    _clear_before_the_daemon(load)
    churn = Churn(load, args.running, args.rate)
    stamps_path = Path(info["hook_stamps"])
    levels = []
    with CcBackendStandin(TOKEN, clusters=[cluster.name], commit_interval=COMMIT) as standin:
        cfg = write_config(cluster, standin, tmp, slurmPollInterval=POLL,
                           prepSockListenPath=info["hook_socket"], ccPollInterval=CC_POLL)
        LastRun(tmp / "lastrun").set(time.time() - 5)
        daemon = DaemonProc(cfg, tmp / "daemon.log",
                            log_level=CYCLE_LINES)
        daemon.start()
        assert daemon.proc is not None
        try:
            for level in args.sizes:
                have = load.pending_queued()
                if level > have:
                    log(f"filling the queue from {have} to {level} (churn paused)")
                    churn.stop()
                    fill = load.fill(level - have)
                    log(f"filled {fill.submitted} in {fill.seconds:.0f} s "
                        f"({fill.rate:.0f} jobs/s)")
                churn.stop()
                churn.start(hold_queued=level)
                log(f"queue {level}: warm-up {args.warmup:.0f} s")
                time.sleep(args.warmup)
                levels.append(measure_level(level, daemon.proc.pid, daemon.log,
                                            args.duration, cluster.prefix, cluster.name,
                                            args.anchor_runs, sorted(
                                                s.job_id for s in
                                                load.recorder.submissions(CHURN))))
            churn.stop()
            churn_ids = sorted(s.job_id for s in load.recorder.submissions(CHURN))
            log(f"churn stopped; waiting for {len(churn_ids)} churn jobs to be delivered")
            problems = _settle(standin, cluster, churn_ids, args.running / args.rate + 300)
        finally:
            code = daemon.terminate()
        truth = _truth(cluster, churn_ids)
        lost, duplicated = lost_and_duplicated(truth, by_run(standin.started(cluster.name)),
                                               by_run(standin.stopped()))
        received = {}
        for r in standin.requests(START_PATH):
            if r.status == 201 and r.body:
                received.setdefault(int(r.body["jobId"]), r.time)
        queued_ids = {s.job_id for s in load.recorder.submissions(QUEUED)}
        sent_queued = len(queued_ids & set(received))
    stamps = read_stamps(stamps_path)
    start_times = {j: t["start"] for j, t in truth.items() if t["start"]}
    for lv in levels:
        lv["latency"] = start_latency(stamps, received, start_times, churn_ids,
                                      lv["t0"], lv["t1"]).summary()
    ran = [j for j, t in truth.items() if t["start"] and t["nodes"]]
    counted = {"submitted": len(churn_ids), "ran": len(ran),
               "never_listed": len(set(churn_ids) - set(truth)),
               "problems": len(problems), "examples": problems[:5],
               "lost": lost, "duplicated": duplicated,
               "queued_submitted": len(queued_ids), "queued_sent": sent_queued,
               "daemon_exit": code}
    log(f"counted: {counted}")
    log_text = daemon.log.read_text(errors="replace")
    counted["tracebacks"] = log_text.count("Traceback")
    load.cancel_all()
    load.close()
    return {"levels": levels, "count": counted, "churn": churn.results,
            "nodes": len(info["nodes"]), "version": info["version"]}


def _clear_before_the_daemon(load: Load) -> None:
    """Cancel what an earlier run left (e.g. its 50,000 queued jobs) and, if anything was
    cancelled, wait until that moment lies before the daemon's first window (lastRun less
    slurmWindowOverlap) and so before every part slurm-lookback reads. Else each pass of
    slurm-lookback over that part costs slurmdbd about a second: its ENDED listing examines
    every job that ended in the part, never-started ones too, before ``--nnodes`` drops
    them (a 600 s part holding 50,000 cancelled pending jobs: 1.03 s against 0.07 s). That
    is a real cost, of a mass cancellation, but not the workload this benchmark measures."""
    left = load.pending_queued()
    load.cancel_all()
    if left:
        wait = OVERLAP + 10
        log(f"cancelled {left} pending jobs left by an earlier run; waiting {wait:.0f} s so "
            "that their end lies before the daemon's first window")
        time.sleep(wait)


def _settle(standin: CcBackendStandin, cluster: Cluster, ids: list[int],
            timeout: float) -> list[str]:
    """Until every churn job is delivered exactly once (or the time is up); the problems."""
    deadline = time.monotonic() + timeout
    while True:
        problems = []
        for i in range(0, len(ids), 2000):
            problems += exactly_once(standin, cluster, ids[i:i + 2000])
        if not problems or time.monotonic() > deadline:
            return problems
        log(f"{len(problems)} problems left, e.g. {problems[0]}")
        time.sleep(30)


def _truth(cluster: Cluster, ids: list[int]) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for i in range(0, len(ids), 2000):
        out.update(sacct_truth(cluster, ids[i:i + 2000]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="0,10000,50000",
                   type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--duration", type=float, default=600.0, help="seconds per window")
    p.add_argument("--warmup", type=float, default=60.0)
    p.add_argument("--nodes", type=int, default=128)
    p.add_argument("--running", type=int, default=500)
    p.add_argument("--rate", type=float, default=5.0, help="churn, jobs per second")
    p.add_argument("--anchor-runs", type=int, default=3)
    p.add_argument("--history", type=int, default=500_000,
                   help="job records slurmdbd holds for the cluster (tests.testbed.history)")
    p.add_argument("--keep-bed", action="store_true", help="leave clusterscale up")
    args = p.parse_args(argv)
    started = time.monotonic()
    info = bed_up(args.nodes)
    log(f"job history: {history.rows():,} rows; growing it to {args.history:,}")
    history_rows = history.grow(args.history)
    with tempfile.TemporaryDirectory(prefix="ccscale-") as tmp:
        data = run_levels(args, info, Path(tmp))
    # read while the bed is up: with no other test-bed cluster up, `down scale` stops the
    # MariaDB that slurmdbd and this count share
    data["history_rows"], data["history_rows_end"] = history_rows, history.rows()
    if not args.keep_bed:
        subprocess.run([str(TESTBED), "down", "scale"], check=False, stdin=subprocess.DEVNULL)
    data["plot"] = plot(data, results.RESULTS / "scale.png")
    command = "flock /tmp/clusterscale.lock " + results.command_line("tests.bench.scale", argv)
    path = results.write("scale", command=command, receiver=STANDIN,
                         plan={"sizes": args.sizes, "duration_s": args.duration,
                               "warmup_s": args.warmup, "nodes": args.nodes,
                               "running": args.running, "rate": args.rate, "poll": POLL,
                               "cc_poll": CC_POLL, "commit_interval": COMMIT,
                               "anchor_runs": args.anchor_runs, "history": args.history},
                         data=data, took_s=time.monotonic() - started)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
