"""ccadapter beside cc-slurm-adapter (issue 38): the same workload on one Slurm 25.05 cluster,
each product into its own real cc-backend 1.5.4, compared with Slurm's own answer.

One *run* is the test bed's workload (tests/integration/workload.py: 13 jobs, arrays, a het
job, GPU, cancels, a timeout) plus a job requeued while it runs, with ``queued`` held jobs
waiting in the queue throughout, with the Prolog/Epilog hook or without. Per product it gives:

- fields: every run each cc-backend holds against ``sacct``'s parsable text and slurmctld's
  allocation, read by the benchmark (tests/integration/expect.py), never by either product;
- latency from the moment slurmctld ran the hook wrapper (its stamp) to the start_job /
  stop_job cc-backend took (its fault proxy's log);
- CPU of the daemon and of the Slurm commands it ran (/proc: utime+stime, cutime+cstime),
  peak and final RSS;
- load: slurmctld's (``sdiag``) and slurmdbd's (``sacctmgr show stats``) RPC counts over the
  run, per minute. Both products run as root, as the workload's driver does, so a leg with no
  daemon at all is the baseline subtracted: ``legs`` says which products run, one at a time
  (``together``: both at once, for fields and latency only).

``python -m tests.bench.side_by_side`` runs every size and writes
tests/bench/results/side-by-side.json; tests/integration/test_predecessor_live.py runs the
short one (both at once, the hook, an empty queue) in tests/run.
"""

from __future__ import annotations

import argparse
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ccadapter.runtime.lastrun import LastRun
from tests.bench.render_side_by_side import wrong_runs
from tests.bench.scale_probe import percentiles, read_stamps
from tests.ccbackend import CcBackend
from tests.integration.expect import by_run, delivery_problems
from tests.integration.expect import ran as ran_
from tests.integration.sync_scenario import delivered, wait_for
from tests.integration.workload import (
    Cluster,
    cancel_leftovers,
    controller_allocations,
    drive,
    het_allocations,
    het_merged,
    sacct_truth,
    submit,
    submitted_allocations,
    testbed_clusters,
)
from tests.predecessor import (
    Daemon,
    chain_hook,
    site_config,
    start_ccadapter,
    start_predecessor,
)
from tests.testbed.load import JOB_NAMES, QUEUED, Load

PRODUCTS = ("ccadapter", "cc-slurm-adapter")
START, STOP = "/api/jobs/start_job/", "/api/jobs/stop_job/"
_RPC = re.compile(r"^\s+(\S+)\s+\(\s*\d+\)\s+count:(\d+)")


def rpc_counts(text: str) -> dict[str, int]:
    """Counts per message type of ``sdiag`` or ``sacctmgr show stats`` output."""
    counts: dict[str, int] = {}
    inside = False
    for line in text.splitlines():
        if "statistics by message type" in line:
            inside = True
            continue
        if inside and ("statistics by user" in line or not line.strip()):
            break
        m = _RPC.match(line) if inside else None
        if m:
            counts[m.group(1)] = int(m.group(2))
    return counts


def load_now(cluster: Cluster) -> tuple[dict[str, int], dict[str, int]]:
    return (rpc_counts(cluster.run("sdiag")),
            rpc_counts(cluster.run("sacctmgr", "show", "stats")))


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def latencies(cc: CcBackend, stamps_file: Path,
              ids: set[int]) -> tuple[list[float], list[float]]:
    """Seconds from the Prolog (Epilog) stamp of the hook wrapper to the first start_job
    (stop_job) cc-backend answered with success, per job."""
    out: tuple[list[float], list[float]] = ([], [])
    for i, (path, ok, context) in enumerate(((START, 201, "prolog_slurmctld"),
                                             (STOP, 200, "epilog_slurmctld"))):
        stamps = read_stamps(stamps_file, context)
        seen: set[int] = set()
        for ex in cc.requests(path):
            job = (ex.body or {}).get("jobId")
            if ex.status != ok or job not in ids or job in seen or job not in stamps:
                continue
            seen.add(job)
            out[i].append(ex.time - stamps[job])
    return out


@dataclass
class Side:
    """What one product did in one run."""
    runs: int = 0
    wrong_runs: int = 0
    problems: list[str] = field(default_factory=list)
    requeued_first_run: str = ""  # the state cc-backend holds for the requeued job's 1st run
    cpu_start: float = 0.0  # from its start until the workload began (both parts)
    cpu_self: float = 0.0  # over the workload: the daemon's own
    cpu_children: float = 0.0  # over the workload: the Slurm commands it ran
    rss_peak_mb: float = 0.0
    rss_mb: float = 0.0
    start_p50: float | None = None
    start_p95: float | None = None
    stop_p50: float | None = None
    stop_p95: float | None = None
    ctld_rpcs: dict[str, int] = field(default_factory=dict)
    dbd_rpcs: dict[str, int] = field(default_factory=dict)
    minutes: float = 0.0


def fill_queue(cluster: Cluster, n: int) -> None:
    """``n`` held jobs waiting in the queue (as a production queue waits)."""
    if n:
        Load(cluster.prefix, queue_partition="debug", held=True,
             log=lambda msg: print(msg, flush=True)).fill(n)


def empty_queue(cluster: Cluster) -> None:
    cluster.run("scancel", "-n", JOB_NAMES[QUEUED], check=False, timeout=600)
    cancel_leftovers(cluster, timeout=600)


def requeue_one(cluster: Cluster) -> int:
    out = cluster.run("sbatch", "--parsable", "-J", "requeued", "-o", "/dev/null",
                      "--wrap", "sleep 20")
    job = int(out.strip().split(";")[0])
    wait_for(lambda: cluster.run("squeue", "-h", "-j", str(job), "-o", "%T",
                                 check=False).strip() == "RUNNING", 60, "requeued job not running")
    time.sleep(4)
    cluster.run("scontrol", "requeue", str(job))
    return job


def run(cluster: Cluster, tmp: Path, *, legs: tuple[str, ...], hook: bool = True,
        poll: int = 10) -> dict[str, Side]:
    """One workload with ``legs`` running ("both": the two products at once; "none": no
    daemon, the load baseline), beside whatever waits in the queue (:func:`fill_queue`).
    Returns a Side per product that ran; the workload's jobs are cancelled at the end."""
    tmp.mkdir(parents=True, exist_ok=True)
    both = legs == ("both",)
    names = PRODUCTS if both else tuple(p for p in legs if p != "none")
    ccs: dict[str, CcBackend] = {}
    daemons: dict[str, Daemon] = {}
    sides = {p: Side() for p in names}
    try:
        for p in names:
            ccs[p] = CcBackend(tmp / f"cc-{p}", [cluster], commit_interval="5s").start()
            # ccadapter's hook is the test bed wrapper's own; without the hook it listens
            # where no hook sends
            listen = None if p != "ccadapter" else cluster.hook_socket if hook else \
                str(tmp / p / "run" / "unused.sock")
            conf = site_config(ccs[p].url, ccs[p].token, tmp / p, poll=poll, listen=listen)
            LastRun(tmp / p / "lastrun").set(time.time() - 5)
            log = tmp / f"{p}.log"
            daemons[p] = (start_ccadapter(cluster, conf, log) if p == "ccadapter"
                          else start_predecessor(cluster, conf, log))
            if p == "cc-slurm-adapter" and hook:
                chain_hook(cluster, "cc-slurm-adapter", conf)
        if "ccadapter" in daemons:
            daemons["ccadapter"].wait_log("listening for Prolog/Epilog")
        time.sleep(2)
        t0 = time.time()
        began = {p: d.usage() for p, d in daemons.items()}
        before = load_now(cluster)
        requeued = requeue_one(cluster)  # first: the workload fills the nodes
        sub = submit(cluster)
        drive(sub)
        ids = sub.all_ids()
        truth = het_merged(sacct_truth(cluster, ids))
        ran = [j for j, t in truth.items() if ran_(t)]
        wait_for(lambda: all(delivered(cc, ran) for cc in ccs.values()), 240,
                 "not every run reached every cc-backend")
        after = load_now(cluster)
        minutes = (time.time() - t0) / 60
        for p, d in daemons.items():
            u, u0 = d.usage(), began[p]
            s = sides[p]
            s.cpu_start = u0.cpu
            s.cpu_self, s.cpu_children = u.cpu_self - u0.cpu_self, u.cpu_children - u0.cpu_children
            s.rss_peak_mb, s.rss_mb = u.rss_peak_mb, u.rss_mb
            s.minutes = minutes
            s.ctld_rpcs, s.dbd_rpcs = delta(after[0], before[0]), delta(after[1], before[1])
    finally:
        chain_hook(cluster, None)
        for d in daemons.values():
            d.stop()
    cancel(cluster, [*ids, requeued])
    if not names:  # the baseline: the load alone
        return {"none": Side(minutes=minutes, ctld_rpcs=delta(after[0], before[0]),
                             dbd_rpcs=delta(after[1], before[1]))}
    allocs = het_allocations(truth, {**controller_allocations(cluster),
                                     **submitted_allocations(sub)})
    try:
        for p, cc in ccs.items():
            cc.wait_committed()
            s = sides[p]
            s.problems = delivery_problems(cluster.name, truth, by_run(cc.started(cluster.name)),
                                           by_run(cc.stopped(cluster.name)), allocs)
            s.runs = len(ran)
            s.wrong_runs = wrong_runs({"problems": s.problems})
            first = [j for j in cc.jobs(cluster.name) if j["jobId"] == requeued]
            s.requeued_first_run = first[0]["jobState"] if first else "absent"
            starts, stops = latencies(cc, Path(cluster.hook_stamps), set(ids)) if hook \
                else ([], [])
            s.start_p50, s.start_p95 = (percentiles(starts)[k] for k in ("p50", "p95"))
            s.stop_p50, s.stop_p95 = (percentiles(stops)[k] for k in ("p50", "p95"))
    finally:
        for cc in ccs.values():
            cc.stop()
    return sides


def cancel(cluster: Cluster, ids: list[int]) -> None:
    """The workload's jobs still queued or running (the requeued job's second run), not
    the queue the run was given."""
    cluster.run("scancel", *map(str, ids), check=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.side_by_side")
    ap.add_argument("--sizes", default="0,2000", help="queued jobs, comma separated")
    ap.add_argument("--cluster", default="cluster2505")
    ap.add_argument("--out", type=Path, default=Path("/tmp/side-by-side"))
    ap.add_argument("--add", action="store_true",
                    help="keep the committed results of the other sizes (each size's runs "
                         "name the commit they were measured at)")
    args = ap.parse_args(argv)
    from tests.bench import results
    cluster = next(c for c in testbed_clusters() if c.name == args.cluster)
    started = time.time()
    sizes = [int(s) for s in args.sizes.split(",")]
    data: list[dict[str, Any]] = []
    kept = results.load("side-by-side") if args.add else None
    if kept:
        data = [r for r in kept["data"]["runs"] if r["queued"] not in sizes]
        for r in data:
            r.setdefault("commit", kept["machine"]["commit"])
        sizes_all = sorted({r["queued"] for r in data} | set(sizes))
        args.sizes = ",".join(map(str, sizes_all))
        argv = ["--sizes", args.sizes]  # the command that measures them all
    shutil.rmtree(args.out, ignore_errors=True)
    commit = results.machine()["commit"]
    for size in sizes:
        empty_queue(cluster)
        t_fill = time.time()
        fill_queue(cluster, size)
        print(f"{size} jobs queued in {time.time() - t_fill:.0f} s", flush=True)
        # the load of the workload alone: the hook wrapper runs whether a daemon listens
        base = asdict(run(cluster, args.out / f"{size}-none", legs=("none",))["none"])
        for hook in (True, False):
            tag = f"{size}-{'hook' if hook else 'poll'}"
            entry: dict[str, Any] = {"queued": size, "hook": hook, "none": base,
                                     "commit": commit}
            for product in PRODUCTS:
                sides = run(cluster, args.out / f"{tag}-{product}", legs=(product,),
                            hook=hook)
                entry[product] = asdict(sides[product])
                print(tag, product, {k: (round(v.cpu_self + v.cpu_children, 2), v.cpu_start,
                                         v.wrong_runs, v.rss_mb) for k, v in sides.items()},
                      flush=True)
            data.append(entry)
            data.sort(key=lambda r: (r["queued"], not r["hook"]))
        # written after each size: a long run's sizes done are kept if a later one fails
        results.write("side-by-side",
                      command=results.command_line("tests.bench.side_by_side", argv,
                                                   lock=True),
                      receiver="cc-backend 1.5.4",
                      plan={"cluster": cluster.name, "version": cluster.version,
                            "sizes": args.sizes, "poll_s": 10},
                      data={"runs": data}, took_s=time.time() - started)
    empty_queue(cluster)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
