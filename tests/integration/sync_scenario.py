"""The sync engine end to end: real Slurm, the ccadapter daemon as a process, the real
cc-backend 1.5.4 (tests/ccbackend.py) behind its fault proxy, and the faults of issue 3
(cc-backend 503 for minutes, the daemon SIGKILLed during delivery, slurmdbd stopped for a
cycle). What cc-backend holds is read back through its own API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import CcBackend
from tests.integration.expect import by_run, delivery_problems
from tests.integration.workload import (
    Allocation,
    AllocationWatcher,
    Cluster,
    controller_allocations,
    het_allocations,
    het_merged,
    sacct_truth,
)
from tests.standin.ccbackend import CcBackendStandin

TOKEN = "it-token-0123456789abcdef"  # the stand-in's (the real server's JWTs are its own)
START, STOP = "/api/jobs/start_job/", "/api/jobs/stop_job/"


def write_config(cluster: Cluster, receiver: CcBackend | CcBackendStandin, tmp: Path,
                 **extra) -> Path:
    cfg = {
        "ccRestUrl": receiver.url, "ccRestJwt": receiver.token,
        "pidFilePath": str(tmp / "run" / "daemon.pid"),
        "prepSockListenPath": str(tmp / "run" / "daemon.sock"),
        "lastRunPath": str(tmp / "lastrun"), "stateDirectory": str(tmp / "state"),
        "slurmCommandPrefix": list(cluster.prefix), "slurmPollInterval": 2,
        **extra,
    }
    path = tmp / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def ccadapter(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ccadapter", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@dataclass
class DaemonProc:
    config: Path
    log: Path
    proc: subprocess.Popen | None = None
    log_level: str = "info"

    def start(self) -> None:
        fh = self.log.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ccadapter", "daemon", "--config", str(self.config),
             "--log-level", self.log_level], stdout=fh, stderr=fh, stdin=subprocess.DEVNULL)
        fh.close()

    def wait_listening(self, timeout: float = 30) -> None:
        """Until the daemon listens for the Prolog/Epilog hook (its start is done)."""
        wait_for(lambda: "listening for Prolog/Epilog" in self.log.read_text(), timeout,
                 "daemon not listening")

    def kill(self) -> None:
        assert self.proc
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self) -> int:
        assert self.proc
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def submit_batch(cluster: Cluster, tag: str, n: int) -> list[int]:
    ids = []
    for i in range(n):
        out = cluster.run("sbatch", "--parsable", "-J", f"{tag}{i}", "-o", "/dev/null",
                          "--wrap", f"sleep {1 + i % 4}")
        ids.append(int(out.strip().split(";")[0]))
    return ids


def wait_for(predicate, timeout: float, what: str) -> None:
    until = time.time() + timeout
    while not predicate():
        if time.time() > until:
            raise TimeoutError(what)
        time.sleep(0.5)


def delivered(cc: CcBackend | CcBackendStandin, ids: list[int]) -> bool:
    """Does cc-backend hold every one of these jobs as stopped?"""
    stopped = {b["jobId"] for b in cc.stopped()}
    return set(ids) <= stopped


@dataclass
class Outcome:
    cluster: Cluster
    cc: CcBackend
    ids: list[int] = field(default_factory=list)
    exit_code: int | None = None
    log: str = ""
    phases: dict[str, float] = field(default_factory=dict)
    allocs: dict[int, Allocation] = field(default_factory=dict)  # slurmctld's, read meanwhile


def resilience(cluster: Cluster, tmp: Path, outage: float) -> Outcome:
    cc = CcBackend(tmp / "cc-backend", [cluster]).start()
    out = Outcome(cluster, cc)
    cfg = write_config(cluster, cc, tmp, ccPollInterval=3600)
    LastRun(tmp / "lastrun").set(time.time() - 5)
    daemon = DaemonProc(cfg, tmp / "daemon.log")
    # slurmctld's record of every job while it runs and MinJobAge after: the truth where
    # slurmdbd, stopped in D, ends with a placeholder record (expect.dbd_placeholder)
    watcher = AllocationWatcher(cluster)
    watcher.start()
    daemon.start()
    try:
        t0 = time.time()
        # A: plain operation
        ids = submit_batch(cluster, "a", 6)
        out.ids += ids
        wait_for(lambda: delivered(cc, ids), 120, "batch a not delivered")
        out.phases["normal"] = time.time() - t0
        # B: cc-backend answers 503 for `outage` seconds while jobs run and end
        cc.fail_with(503)
        ids = submit_batch(cluster, "b", 6)
        out.ids += ids
        time.sleep(outage)
        cc.fail_with(None)
        t1 = time.time()
        wait_for(lambda: delivered(cc, ids), 400, "batch b not delivered after 503s")
        out.phases["catch-up after 503"] = time.time() - t1
        # C: the daemon is SIGKILLed while it delivers (slow cc-backend), then restarted
        cc.latency(0.3)
        ids = submit_batch(cluster, "c", 8)
        out.ids += ids
        wait_for(lambda: any(b["jobId"] in ids for b in cc.started()), 120,
                 "batch c: no start before the kill")
        daemon.kill()
        cc.latency(0)
        daemon.start()
        wait_for(lambda: delivered(cc, ids), 180, "batch c not delivered after SIGKILL")
        # D: slurmdbd stopped for a few cycles while jobs run and end
        dbd_pid = Path(cluster_root(cluster), "run/slurmdbd.pid").read_text().strip()
        os.kill(int(dbd_pid), signal.SIGTERM)
        ids = submit_batch(cluster, "d", 4)
        out.ids += ids
        time.sleep(8)
        repo = Path(__file__).resolve().parents[2]
        # `up` restarts the dead slurmdbd; the hook stays configured as tests/run set it up
        subprocess.run([str(repo / "tests" / "testbed" / "slurm"), "up", cluster.short[:2]],
                       check=True, capture_output=True, timeout=300, stdin=subprocess.DEVNULL,
                       env={**os.environ,
                            "CCADAPTER_HOOK_PY": str(repo / "ccadapter" / "prep" / "hook.py")})
        wait_for(lambda: delivered(cc, ids), 240, "batch d not delivered after slurmdbd")
    finally:
        out.exit_code = daemon.terminate() if daemon.proc.poll() is None else daemon.proc.returncode
        out.log = daemon.log.read_text()
        watcher.stop()
        out.allocs = watcher.allocations()
    return out


def cluster_root(cluster: Cluster) -> str:
    return cluster.prefix[1] if cluster.prefix else "/"


def exactly_once(cc: CcBackend | CcBackendStandin, cluster: Cluster, ids: list[int],
                 allocs: dict[int, Allocation] | None = None) -> list[str]:
    """Compare what cc-backend holds (the real server: read back through its API once its job cache
    is committed; the stand-in: what it received) with Slurm's own answer
    (tests/integration/expect.py: every field, exactly once); returns the problems. CPU ids come
    from what slurmctld holds now (jobs ended within MinJobAge) unless ``allocs`` (read while
    the jobs ran, with their GPU indices) says more. A het job is one job under its leader's id
    (``het_merged``); its other components' ids must never reach cc-backend."""
    truth = het_merged(sacct_truth(cluster, ids))
    known = het_allocations(truth, {**controller_allocations(cluster), **(allocs or {})})
    if isinstance(cc, CcBackend):
        cc.wait_committed()
    problems = delivery_problems(cluster.name, truth, by_run(cc.started(cluster.name)),
                                 by_run([b for b in cc.stopped()
                                        if b["cluster"] == cluster.name]), known)
    bad = [r for r in cc.requests() if r.status == 400]
    if bad:
        problems.append(f"{len(bad)} answers 400: {bad[:2]}")
    return problems
