"""Issue 36 on real Slurm 22.05: three attacks on the hook socket by another local user, each
for 60 s beside 20 real jobs.

The attacker is ``nobody`` (tests/integration/hostile.py under Debian's python3), on the
cluster's loopback TCP hook port, as any local user could reach it; the real jobs' hooks run
as SlurmUser (root on this cluster). ``replay`` sends a start and an end for every id squeue
prints, again and again; ``future`` announces the next 60 ids; ``idle`` holds every
connection it can. A first round without attack gives what the 20 jobs and the poll ask of
slurmctld by themselves. For each attack: every real job's start reaches cc-backend within
1 s of its PrologSlurmctld (p95), none waits for the poll; slurmctld's questions (sdiag:
REQUEST_JOB_INFO_SINGLE and REQUEST_BATCH_SCRIPT) beyond the quiet round stay within what the
README states (80 at once, 4 a second); the daemon's peak RSS stays within 100 MB.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.bench.hook import stamps_file
from tests.bench.scale_probe import read_stamps
from tests.ccbackend import CcBackend
from tests.integration.conftest import hook_configured
from tests.integration.sync_scenario import wait_for
from tests.integration.test_hook_flood_live import sdiag_rpcs, vm_hwm_mb
from tests.integration.test_hook_live import start_daemon
from tests.integration.test_metrics_live import free_port, get, parse, scrape
from tests.integration.workload import Cluster

pytestmark = pytest.mark.integration

SECONDS = 60
JOBS = 20
HOSTILE = Path(__file__).with_name("hostile.py")
QUESTIONS = ("REQUEST_JOB_INFO_SINGLE", "REQUEST_BATCH_SCRIPT")
# README "A TCP hook socket": senders other than slurmctld's own, together
BURST, RATE = 80, 4


def questions(cluster: Cluster) -> int:
    """slurmctld's own count of the questions the fast path asks (sdiag's RPC counts)."""
    return sdiag_rpcs(cluster, *QUESTIONS)


class Squeue(threading.Thread):
    """Writes the ids squeue prints into a file the attacker may read, every second."""

    def __init__(self, cluster: Cluster, path: Path) -> None:
        super().__init__(daemon=True)
        self.cluster, self.path, self.stop = cluster, path, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            out = self.cluster.run("squeue", "-h", "-o", "%i", check=False)
            ids = [w for w in out.split() if w.isdigit()]
            self.path.write_text(" ".join(ids))
            self.path.chmod(0o644)


def round_of(cluster: Cluster, cc: CcBackend, attack: str | None, shared: Path,
             stamps: Path) -> dict:
    """20 real jobs over 60 s, beside ``attack`` (None: alone); ``stamps``: where the test
    bed's hook wrapper notes when slurmctld ran PrologSlurmctld."""
    asked = questions(cluster)
    ids_file = shared / "ids"
    ids_file.write_text("")
    ids_file.chmod(0o644)
    squeue = Squeue(cluster, ids_file)
    squeue.start()
    attacker = None
    if attack:
        _, spec = cluster.hook_socket.split(":", 1)
        attacker = subprocess.Popen(
            ["/usr/bin/python3", str(HOSTILE), attack, f"tcp:{spec}", cluster.name,
             str(ids_file), str(SECONDS)], user="nobody", group="nogroup",
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    began = time.monotonic()
    jobs = []
    try:
        time.sleep(2)  # the attack is on before the first job
        for _ in range(JOBS):
            out = cluster.run("sbatch", "--parsable", "-J", f"beside-{attack}", "-o",
                              "/dev/null", "--wrap", "sleep 2")
            jobs.append(int(out.strip().split(";")[0]))
            time.sleep(max(0.0, (SECONDS - 8) / JOBS))
        sent = {}
        if attacker:
            out, err = attacker.communicate(timeout=SECONDS + 30)
            assert attacker.returncode == 0, err[-2000:]
            sent = json.loads(out.strip().splitlines()[-1])
        took = time.monotonic() - began
        wait_for(lambda: {b["jobId"] for b in cc.stopped()} >= set(jobs), 90,
                 "the real jobs were not delivered")
    finally:
        squeue.stop.set()
        if attacker and attacker.poll() is None:
            attacker.kill()
            attacker.communicate()
    starts = {r.body["jobId"]: r.time for r in cc.requests("/api/jobs/start_job/")
              if r.status == 201 and r.body and r.body["jobId"] in jobs}
    prologs = read_stamps(stamps)
    latency = sorted(starts[j] - prologs[j] for j in jobs)
    return {"attack": attack or "none", "jobs": jobs, "sent": sent, "seconds": took,
            "asked": questions(cluster) - asked, "latency": latency,
            "p95": latency[int(0.95 * (len(latency) - 1))],
            "median": statistics.median(latency)}


@pytest.fixture(scope="module")
def attacked(testbed, tmp_path_factory) -> dict:
    cluster = testbed["22.05"]
    assert hook_configured(cluster) and cluster.hook_socket.startswith("tcp:")
    tmp = tmp_path_factory.mktemp("attacks")
    shared = Path("/tmp") / f"ccadapter-attacks-{tmp.name}"
    shared.mkdir(mode=0o755, exist_ok=True)
    metrics = f"127.0.0.1:{free_port()}"
    rounds = {}
    stamps = stamps_file(cluster)
    with CcBackend(tmp / "cc-backend", [cluster]) as cc:
        daemon = start_daemon(cluster, cc, tmp, poll=30, metricsListen=metrics)
        try:
            for attack in (None, "replay", "future", "idle"):
                rounds[attack or "none"] = round_of(cluster, cc, attack, shared, stamps)
            samples = parse(scrape(f"http://{metrics}/metrics"))
            peak = vm_hwm_mb(daemon.proc.pid)
        finally:
            assert daemon.terminate() == 0
    drops = {r: get(samples, "ccadapter_hook_messages_dropped_total", reason=r)
             for r in ("known", "share", "connections", "unknown_job", "flood", "timeout")}
    log = daemon.log.read_text()
    for name, run in rounds.items():
        print(f"\n{name}: sent {run['sent']}; real jobs' start after their prolog: median "
              f"{run['median']:.3f} s, p95 {run['p95']:.3f} s, max {run['latency'][-1]:.3f} s;"
              f" slurmctld questions (sdiag single job + batch script) {run['asked']} in "
              f"{run['seconds']:.0f} s")
    print(f"drops {drops}; daemon peak RSS {peak:.0f} MB")
    return {"rounds": rounds, "drops": drops, "peak": peak, "log": log}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("attack", ["replay", "future", "idle"])
def test_real_jobs_keep_the_fast_path_and_slurmctld_its_bound(attacked, attack):
    run, quiet = attacked["rounds"][attack], attacked["rounds"]["none"]
    assert run["p95"] <= 1.0, run["latency"]
    assert run["latency"][-1] < 5.0, run["latency"]  # none dropped: none waited for the poll
    assert run["asked"] - quiet["asked"] <= BURST + RATE * run["seconds"], (run, quiet)
    assert attacked["peak"] <= 100
    assert "Traceback" not in attacked["log"]
    reason = {"replay": "share", "future": "share", "idle": "connections"}[attack]
    assert attacked["drops"][reason] > 0
