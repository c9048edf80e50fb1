"""The burst benchmark (issue 47): what a burst of jobs costs slurmctld, with no daemon, with
ccadapter (hook and poll) and with cc-slurm-adapter, measured at slurmctld.

On clusterscale (tests/testbed/slurm up scale: Slurm 22.05, 16 nodes of 8 CPUs, 128 tasks at
once), with ``queued`` jobs waiting (eligible, in the DOWN partition ``queue``: the scheduler
walks them at each pass), one product at a time runs three legs:

- ``array``: a ``tasks``-task array that starts as fast as slurmctld starts it, until every
  task ended (each sleeps 1 s);
- ``cancel``: an array of one task per CPU, all running, then ``scancel`` of it at once;
- ``steady``: ``rate`` single jobs a second for ``steady`` seconds (each sleeps 2 s).

Per leg: slurmctld's RPCs by type (``sdiag``, before and after, the after once the product
holds every run stopped), slurmctld's CPU seconds (/proc of its pid), and a user's view
measured every second by a thread of its own, as ``ccuser`` (a user with no job in the
queue): the wall time of ``squeue --me`` and of ``sbatch -H`` (p50/p99). For a product: its
start and stop latency from the hook wrapper's stamp to cc-backend's answer, and every run
held exactly once with Slurm's fields (tests/integration/sync_scenario.exactly_once). The
product's RPCs are its leg's minus the same leg's without a daemon; the RPCs of a job's
question family (:data:`JOB_RPCS`) are counted by the test in CI, where no baseline runs:
nothing but a product asks those during a leg.

    .venv/bin/python -m tests.bench.burst                      # writes results/burst.json
    .venv/bin/python -m tests.bench.burst --queued 5000 --tasks 2000 --steady 60 --rate 20

tests/integration/test_burst_live.py runs the short version (ccadapter alone) in tests/run.
cc-slurm-adapter supports Slurm 24 and 25 only: on clusterscale's 22.05 it is not run, and the
results say so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ccadapter.runtime.lastrun import LastRun
from tests.bench import results
from tests.bench.scale_probe import own_cpu_seconds, percentiles
from tests.bench.side_by_side import delta, latencies, rpc_counts
from tests.ccbackend import CcBackend
from tests.integration.sync_scenario import DaemonProc, exactly_once, wait_for, write_config
from tests.integration.workload import Cluster

# slurmctld RPCs about jobs: what the fast path and the poll ask (show job, batch script,
# the dump of every job, the step list); the workload and the user's probe ask none of them
JOB_RPCS = ("REQUEST_JOB_INFO_SINGLE", "REQUEST_BATCH_SCRIPT", "REQUEST_JOB_INFO",
            "REQUEST_JOB_STEP_INFO")
USER = "ccuser"
NAME = "ccburst"
SLOTS = 128  # clusterscale's CPUs at 16 nodes


@dataclass
class Plan:
    queued: int = 5_000
    tasks: int = 2_000
    cancel: int = SLOTS
    rate: float = 20.0
    steady: float = 60.0
    poll: int = 30  # the product's slurmPollInterval


@dataclass
class Leg:
    name: str
    jobs: int = 0
    seconds: float = 0.0
    rpcs: dict[str, int] = field(default_factory=dict)
    ctld_cpu_s: float = 0.0
    squeue_ms: dict[str, float | None] = field(default_factory=dict)
    sbatch_ms: dict[str, float | None] = field(default_factory=dict)
    start_s: dict[str, float | None] = field(default_factory=dict)
    stop_s: dict[str, float | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def job_rpcs(self) -> int:
        return sum(self.rpcs.get(k, 0) for k in JOB_RPCS)


def ctld_cpu(pid_file: str) -> float:
    """slurmctld's own CPU seconds (its scripts' are not counted: the hook is the product's)."""
    return own_cpu_seconds(int(Path(pid_file).read_text().split()[0]))


class UserProbe(threading.Thread):
    """Every second, as a user of the cluster: ``squeue --me`` and ``sbatch -H``, timed."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True, name="user-probe")
        self.cluster, self.stop_at = cluster, threading.Event()
        self.squeue: list[float] = []
        self.sbatch: list[float] = []

    def _timed(self, *argv: str) -> float:
        began = time.monotonic()
        subprocess.run(["runuser", "-u", USER, "--", *self.cluster.prefix, *argv],
                       capture_output=True, stdin=subprocess.DEVNULL, timeout=120, check=False)
        return (time.monotonic() - began) * 1000

    def run(self) -> None:
        while not self.stop_at.wait(max(0.0, 1.0 - (time.monotonic() % 1.0))):
            self.squeue.append(self._timed("squeue", "--me", "-h"))
            self.sbatch.append(self._timed("sbatch", "-H", "-J", f"{NAME}-probe", "-o",
                                           "/dev/null", "-p", "batch", "--wrap", "true"))

    def done(self) -> tuple[dict, dict]:
        self.stop_at.set()
        self.join(130)
        return tail(self.squeue), tail(self.sbatch)


def tail(values: list[float]) -> dict[str, float | None]:
    """p50 and p99 (nearest rank) of a user's waits, in ms."""
    if not values:
        return {"n": 0, "p50": None, "p99": None}
    v = sorted(values)
    return {"n": len(v), "p50": round(v[len(v) // 2], 1),
            "p99": round(v[min(len(v) - 1, int(0.99 * len(v)))], 1)}


def sbatch(cluster: Cluster, *args: str) -> int:
    out = cluster.run("sbatch", "--parsable", "-p", "batch", "-o", "/dev/null", *args)
    return int(out.strip().split(";")[0])


def ended_ids(cluster: Cluster, ids: list[int], arrays: list[int]) -> tuple[list[int], int]:
    """slurmdbd's raw ids of these jobs and arrays' tasks, and how many ended (sacct: no
    slurmctld RPC)."""
    spec = ",".join(map(str, [*ids, *arrays]))
    out = cluster.run("sacct", "-X", "-n", "-P", "--allusers", "-j", spec, "-o",
                      "JobIDRaw,State,End")
    rows = [ln.split("|") for ln in out.splitlines() if ln.strip()]
    return [int(r[0]) for r in rows], sum(r[2] not in ("", "Unknown") for r in rows)


def until_ended(cluster: Cluster, ids: list[int], arrays: list[int], expect: int,
                timeout: float) -> list[int]:
    until = time.time() + timeout
    while True:
        got, ended = ended_ids(cluster, ids, arrays)
        if len(got) >= expect and ended >= len(got):
            return got
        if time.time() > until:
            raise TimeoutError(f"{ended} of {expect} jobs ended")
        time.sleep(2)


def leg_array(cluster: Cluster, plan: Plan) -> list[int]:
    array = sbatch(cluster, "-J", f"{NAME}-array", "-t", "2", f"--array=0-{plan.tasks - 1}",
                   "--wrap", "sleep 1")
    return until_ended(cluster, [], [array], plan.tasks, 60 + plan.tasks * 0.5)


def leg_cancel(cluster: Cluster, plan: Plan) -> list[int]:
    array = sbatch(cluster, "-J", f"{NAME}-cancel", "-t", "5", f"--array=0-{plan.cancel - 1}",
                   "--wrap", "sleep 300")
    wait_for(lambda: running(cluster, array) >= plan.cancel, 120 + plan.cancel * 0.2,
             "the cancel leg's tasks are not all running")
    time.sleep(3)
    cluster.run("scancel", str(array))
    return until_ended(cluster, [], [array], plan.cancel, 180)


def running(cluster: Cluster, array: int) -> int:
    out = cluster.run("sacct", "-X", "-n", "-P", "--allusers", "-s", "R", "-j", str(array),
                      "-o", "JobIDRaw")
    return len(out.split())


def leg_steady(cluster: Cluster, plan: Plan) -> list[int]:
    ids: list[int] = []
    began = time.monotonic()
    n = int(plan.rate * plan.steady)
    for k in range(n):
        time.sleep(max(0.0, began + k / plan.rate - time.monotonic()))
        ids.append(sbatch(cluster, "-J", f"{NAME}-steady", "-t", "1", "--wrap", "sleep 2"))
    return until_ended(cluster, ids, [], n, 120)


LEGS = {"array": leg_array, "cancel": leg_cancel, "steady": leg_steady}


def run_legs(cluster: Cluster, pid_file: str, plan: Plan, cc: CcBackend | None,
             legs: tuple[str, ...] = tuple(LEGS)) -> list[Leg]:
    """The legs, one after the other, with whatever product runs (``cc``: the cc-backend it
    delivers to; None: no daemon)."""
    out = []
    for name in legs:
        leg = Leg(name)
        probe = UserProbe(cluster)
        before, cpu0, t0 = rpc_counts(cluster.run("sdiag")), ctld_cpu(pid_file), time.time()
        probe.start()
        ids = LEGS[name](cluster, plan)
        if cc is not None:  # the product's last questions are the leg's
            wait_for(lambda ids=ids: {b["jobId"] for b in cc.stopped()} >= set(ids), 300,
                     f"{name}: not every run stopped in cc-backend")
        else:
            time.sleep(5)
        leg.squeue_ms, leg.sbatch_ms = probe.done()
        leg.rpcs = delta(rpc_counts(cluster.run("sdiag")), before)
        leg.ctld_cpu_s, leg.seconds = ctld_cpu(pid_file) - cpu0, time.time() - t0
        leg.jobs = len(ids)
        if cc is not None:
            starts, stops = latencies(cc, Path(cluster.hook_stamps), set(ids))
            leg.start_s, leg.stop_s = percentiles(starts), percentiles(stops)
            leg.problems = exactly_once(cc, cluster, ids)
        cluster.run("scancel", "-n", f"{NAME}-probe", check=False)
        out.append(leg)
    return out


def ccadapter_legs(cluster: Cluster, hook_socket: str, pid_file: str, tmp: Path, plan: Plan,
                   legs: tuple[str, ...] = tuple(LEGS)) -> tuple[list[Leg], str]:
    """The legs with ``ccadapter daemon`` (hook and poll) into a real cc-backend; and its log."""
    with CcBackend(tmp / "cc-backend", [cluster]) as cc:
        cfg = write_config(cluster, cc, tmp, slurmPollInterval=plan.poll,
                           prepSockListenPath=hook_socket, ccPollInterval=3600)
        LastRun(tmp / "lastrun").set(time.time() - 5)
        daemon = DaemonProc(cfg, tmp / "daemon.log")
        daemon.start()
        try:
            daemon.wait_listening(60)
            got = run_legs(cluster, pid_file, plan, cc, legs)
        finally:
            daemon.terminate()
        return got, daemon.log.read_text()


def scale_bed() -> tuple[Cluster, str, str]:
    """clusterscale (up, with the hook), its hook socket and slurmctld's pid file."""
    from tests.integration.scale_bed import NODES, scale_info

    scale = scale_info()
    if scale is None or len(scale.cluster.nodes) < NODES:
        raise SystemExit("clusterscale is not up: CCADAPTER_HOOK_PY=$PWD/ccadapter/prep/hook.py"
                         f" tests/testbed/slurm up scale --nodes {NODES}")
    return scale.cluster, scale.hook_socket, "/run/slurmctld-scale.pid"


def main(argv: list[str] | None = None) -> int:
    from tests.testbed.load import Load

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queued", type=int, default=Plan.queued)
    ap.add_argument("--tasks", type=int, default=Plan.tasks)
    ap.add_argument("--rate", type=float, default=Plan.rate)
    ap.add_argument("--steady", type=float, default=Plan.steady)
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/ccadapter-burst"))
    args = ap.parse_args(argv)
    plan = Plan(queued=args.queued, tasks=args.tasks, rate=args.rate, steady=args.steady)
    cluster, socket, pid_file = scale_bed()
    began = time.time()
    args.tmp.mkdir(parents=True, exist_ok=True)
    load = Load(cluster.prefix, args.tmp / "submitted.jsonl")
    load.cancel_all()
    load.fill(plan.queued)
    data: dict[str, Any] = {"plan": asdict(plan), "cluster": cluster.name,
                            "release": cluster.version, "products": {}}
    try:
        data["products"]["none"] = [asdict(x) for x in run_legs(cluster, pid_file, plan, None)]
        legs, _ = ccadapter_legs(cluster, socket, pid_file, args.tmp / "ccadapter", plan)
        data["products"]["ccadapter"] = [asdict(x) for x in legs]
        data["not_run"] = {"cc-slurm-adapter": f"supports Slurm 24 and 25 only; clusterscale "
                                               f"runs {cluster.version}"}
    finally:
        load.cancel_all()
        load.close()
    results.write("burst", command=" ".join(["python -m tests.bench.burst", *(argv or [])]),
                  receiver="cc-backend 1.5.4", plan=asdict(plan), data=data,
                  took_s=time.time() - began)
    print(json.dumps(data["products"], indent=1)[:4000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
