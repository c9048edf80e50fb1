"""The fault matrix of issue 7: real Slurm, the daemon as a process (REST to the real
cc-backend 1.5.4 through the fault proxy of tests/faultproxy.py, notifications on a real
nats-server with JetStream), a continuous churn of jobs, and faults injected for real while
it runs: cc-backend's 503s and hangs are the proxy's (the real server makes neither on
demand), its disk full is real (its directory on a small tmpfs, filled). Afterwards every
job id sbatch returned (and each task of an array) is looked up in Slurm's accounting (sacct
text, not the JSON the product reads) and compared with what cc-backend holds (read back
through its API) and what NATS received, per fault: jobs lost,
duplicated, or with a field that differs from Slurm's own answer (tests/integration/
expect.py; CPU ids and GPU indices from ``scontrol show job -d``, read every 2 s while the
matrix runs; a GPU job also writes the indices Slurm gave it, ``SLURM_JOB_GPUS``, to a file,
the truth when it began and ended while slurmctld was down and so was never seen running).
A submitted job sacct never lists counts as lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import CcBackend
from tests.integration.expect import by_run, check_start, check_stop, ran
from tests.integration.sync_scenario import DaemonProc, cluster_root, write_config
from tests.integration.test_hook_live import hook_socket
from tests.integration.workload import (
    GPU_REPORT,
    TERMINAL,
    Allocation,
    AllocationWatcher,
    Cluster,
    reported_gpus,
    sacct_truth,
    with_reported_gpus,
)
from tests.lineproto import parse_line
from tests.natsserver import NatsServer, add_stream, stream_messages

REPO = Path(__file__).resolve().parents[2]
GPU_DIR = "/tmp/ccadapter-fault-gpus"  # in the cluster's root, where its jobs write
NATS_PASSWORD = "fault-nats-pw-8e1d77"


@dataclass
class Tally:
    """Per fault: jobs Slurm ran, and how many of them arrived wrongly."""

    jobs: int = 0
    lost: int = 0
    duplicated: int = 0
    wrong: int = 0
    nats_lost: int = 0
    nats_duplicated: int = 0
    nats_wrong: int = 0
    resends: int = 0  # repeats cc-backend answered 422: harmless, shown for information
    unverified: int = 0  # runs whose CPU ids or GPU indices the test could not read
    unaccounted: int = 0  # submitted runs sacct never listed (also counted as lost)
    gpu_forgotten: int = 0  # GPU runs read after their end: slurmctld had dropped the ids
    problems: list[str] = field(default_factory=list)

    def bad(self) -> int:
        return (self.lost + self.duplicated + self.wrong + self.nats_lost +
                self.nats_duplicated + self.nats_wrong + self.unverified)

    def as_dict(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "lost": self.lost, "duplicated": self.duplicated,
                "wrong": self.wrong, "nats_lost": self.nats_lost,
                "nats_duplicated": self.nats_duplicated, "nats_wrong": self.nats_wrong,
                "resends": self.resends, "unverified": self.unverified,
                "unaccounted": self.unaccounted, "gpu_forgotten": self.gpu_forgotten,
                "problems": self.problems[:20]}


class Churn(threading.Thread):
    """Submits a mix of jobs until stopped; each id is filed under the phase it began in."""

    MIX = ("short", "short", "fail", "multinode", "cancel", "array", "short", "long", "gpu")
    ARRAY_TASKS = 2

    def __init__(self, cluster: Cluster, interval: float, gpu_dir: Path) -> None:
        super().__init__(name=f"churn-{cluster.name}", daemon=True)
        self.cluster, self.interval = cluster, interval
        self.gpu_dir = gpu_dir  # as the cluster sees it (inside its chroot)
        self.phase = "normal"
        self.ids: dict[str, list[int]] = {}
        self.tasks: dict[int, int] = {}  # id sbatch returned -> runs it makes (array tasks)
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            try:
                self._submit(self.MIX[i % len(self.MIX)], i)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                self.errors.append(str(exc)[:200])  # slurmctld down: sbatch fails, fine
            i += 1
            self.stopping.wait(self.interval)

    def _submit(self, kind: str, i: int) -> None:
        """Every job has a time limit (minutes), as a site's have: slurmctld stopped
        between allocating a batch job and launching its script recovers the job as running
        and learns otherwise only at the node's next registration (job_mgr.c
        ``_purge_missing_jobs``, 24.11.5:15614-15673), half an hour later on the test bed;
        the limit ends such a job as TIMEOUT within minutes, inside the settle wait. CI saw
        it once: SIGTERM 60 ms after an array's allocation."""
        args = {"short": ["--wrap", f"sleep {1 + i % 3}"],
                "long": ["--wrap", "sleep 12"],
                "fail": ["--wrap", "sleep 1; exit 3"],
                "multinode": ["-N2", "-n2", "--wrap", "sleep 2"],
                "cancel": ["--wrap", "sleep 60"],
                "array": [f"--array=1-{self.ARRAY_TASKS}", "--wrap", "sleep 1"],
                # runs long enough to be seen running (GPU indices exist only then),
                # and says which it got: slurmctld may be down for all of its run
                "gpu": ["-p", "gpu", "--gres=gpu:tesla:1", "--wrap",
                        f"{GPU_REPORT}; sleep 8"],
                }[kind]
        args = ["-t", {"cancel": "3", "gpu": "5"}.get(kind, "2"), *args]
        output = f"{self.gpu_dir}/%j" if kind == "gpu" else "/dev/null"
        out = self.cluster.run("sbatch", "--parsable", "-J", f"f{kind}", "-o", output,
                               *args, timeout=30)
        job_id = int(out.strip().split(";")[0])
        self.ids.setdefault(self.phase, []).append(job_id)
        self.tasks[job_id] = self.ARRAY_TASKS if kind == "array" else 1
        if kind == "cancel":  # cancelled a moment later: running or still pending
            threading.Timer(3 + i % 5, lambda: self.cluster.run(
                "scancel", str(job_id), check=False, timeout=30)).start()

    def total(self) -> int:
        return sum(len(v) for v in self.ids.values())


@dataclass
class Rig:
    cluster: Cluster
    tmp: Path
    cc: CcBackend
    nats: NatsServer
    daemon: DaemonProc
    state_dir: Path
    restarts: int = 0

    def restart_daemon(self, pause: float = 1.0) -> None:
        """What systemd's Restart=on-failure does after a crash."""
        time.sleep(pause)
        self.daemon.start()
        self.restarts += 1

    def log_text(self) -> str:
        return self.daemon.log.read_text(errors="replace")


# --- the faults ---------------------------------------------------------------------------

def cc_503(rig: Rig, seconds: float) -> None:
    rig.cc.fail_with(503)  # the proxy answers in cc-backend's place
    time.sleep(seconds)
    rig.cc.fail_with(None)


def cc_hang(rig: Rig, seconds: float) -> None:
    rig.cc.hang(3600)  # the proxy holds every request; the client's read timeout decides
    time.sleep(seconds)
    rig.cc.hang(None)


def cc_disk_full(rig: Rig, seconds: float) -> None:
    """cc-backend's own disk (its database, archive and checkpoints on a small tmpfs) full
    to the last byte, held, then freed: SQLite refuses to grow, cc-backend answers 500."""
    _fill(rig.cc.directory / "filler", seconds)


def nats_down(rig: Rig, seconds: float) -> None:
    rig.nats.stop()
    time.sleep(seconds)
    rig.nats.start()


def slurmdbd_down(rig: Rig, seconds: float) -> None:
    _stop_slurm_daemon(rig.cluster, "slurmdbd")
    time.sleep(seconds)
    _testbed_up(rig.cluster)


def slurmctld_restart(rig: Rig, seconds: float) -> None:
    _stop_slurm_daemon(rig.cluster, "slurmctld")
    time.sleep(seconds)
    _testbed_up(rig.cluster)


def daemon_kills(rig: Rig, seconds: float, kills: int = 20) -> None:
    """SIGKILL at ``kills`` random moments spread over ``seconds`` (reading, enqueueing,
    delivering, publishing: wherever it happens to be)."""
    rng = random.Random(os.environ.get("CCADAPTER_FAULT_SEED", "7"))
    moments = sorted(rng.uniform(0, seconds) for _ in range(kills))
    t0 = time.time()
    for at in moments:
        time.sleep(max(0.0, t0 + at - time.time()))
        rig.daemon.kill()
        rig.restart_daemon(pause=rng.uniform(0.2, 1.5))


def disk_full(rig: Rig, seconds: float) -> None:
    """Fill the state directory's small tmpfs to the last byte, hold, then free it."""
    _fill(rig.state_dir / "filler", seconds)


def _fill(filler: Path, seconds: float) -> None:
    with filler.open("wb", buffering=0) as fh:  # unbuffered: close() has nothing to flush
        for size in (1 << 20, 65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * size)
    time.sleep(seconds)
    filler.unlink()


FAULTS: dict[str, Callable[[Rig, float], None]] = {
    "cc-backend 503": cc_503, "cc-backend hangs": cc_hang, "NATS stopped": nats_down,
    "slurmdbd stopped": slurmdbd_down, "slurmctld restarted": slurmctld_restart,
    "daemon SIGKILLed x20": daemon_kills, "state disk full": disk_full,
    "cc-backend disk full": cc_disk_full,
}


def _stop_slurm_daemon(cluster: Cluster, name: str) -> None:
    pid = Path(cluster_root(cluster), f"run/{name}.pid").read_text().strip()
    os.kill(int(pid), signal.SIGTERM)
    until = time.time() + 30
    while time.time() < until:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)


def _testbed_up(cluster: Cluster) -> None:
    """`up` restarts the dead daemon; the hook stays configured as tests/run set it up."""
    res = subprocess.run(
        [str(REPO / "tests" / "testbed" / "slurm"), "up", cluster.short[:2]],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        env={**os.environ, "CCADAPTER_HOOK_PY": str(REPO / "ccadapter" / "prep" / "hook.py")})
    if res.returncode:
        raise RuntimeError(f"testbed up {cluster.name}: {res.stdout[-1500:]}{res.stderr[-1500:]}")


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "32m"):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True,
                       stdin=subprocess.DEVNULL)


# --- one run ------------------------------------------------------------------------------

@dataclass
class RunResult:
    cluster: Cluster
    tallies: dict[str, Tally]
    jobs_submitted: int  # ids sbatch returned (an array: one)
    daemon_restarts: int
    exit_code: int | None
    log: str
    seconds: float
    token: str  # the daemon's JWT for cc-backend: never in its log


def run_faults(cluster: Cluster, tmp: Path, plan: list[tuple[str, float]],
               interval: float = 1.0, quiet: float = 15.0) -> RunResult:
    """Churn on ``cluster`` through a quiet phase and each fault of ``plan`` (name,
    seconds), then wait until Slurm and the deliveries settle, then count."""
    t0 = time.time()
    state = tmp / "state"
    with small_tmpfs(tmp / "cc-backend", "64m") as cc_dir, \
            CcBackend(cc_dir, [cluster]) as cc, small_tmpfs(state) as state_dir:
        nats = NatsServer(tmp / "nats").start()
        add_stream(nats.url)
        cfg = write_config(cluster, cc, tmp, stateDirectory=str(state_dir),
                           lastRunPath=str(state_dir / "lastrun"), slurmPollInterval=10,
                           ccPollInterval=3600, prepSockListenPath=hook_socket(cluster),
                           natsServer="127.0.0.1", natsPort=nats.port, natsJetStream=True,
                           natsPublishTimeout=3)
        LastRun(state_dir / "lastrun").set(time.time() - 5)
        daemon = DaemonProc(cfg, tmp / "daemon.log")
        rig = Rig(cluster, tmp, cc, nats, daemon, state_dir)
        watcher = AllocationWatcher(cluster)
        watcher.start()
        daemon.start()
        gpu_dir = Path(cluster_root(cluster), GPU_DIR.lstrip("/"), cluster.name)
        shutil.rmtree(gpu_dir, ignore_errors=True)
        gpu_dir.mkdir(parents=True)
        churn = Churn(cluster, interval, Path(GPU_DIR, cluster.name))
        churn.start()
        exit_code = None
        try:
            time.sleep(quiet)
            for name, seconds in plan:
                churn.phase = name
                FAULTS[name](rig, seconds)
                churn.phase = f"after {name}"
                time.sleep(quiet)
            churn.stopping.set()
            churn.join(60)
            _wait_settled(rig, churn.tasks)
        finally:
            churn.stopping.set()
            watcher.stop()
            if daemon.proc and daemon.proc.poll() is None:
                exit_code = daemon.terminate()
            allocs = with_reported_gpus(watcher.allocations(), reported_gpus(gpu_dir))
            tallies = _count(rig, churn, plan, allocs)
            nats.stop()
            shutil.rmtree(gpu_dir, ignore_errors=True)
        return RunResult(cluster, tallies, churn.total(), rig.restarts, exit_code,
                         rig.log_text(), time.time() - t0, cc.token)


def _listed(truth: dict[int, dict], tasks: dict[int, int]) -> dict[int, list[int]]:
    """Submitted id -> the raw ids of its runs that sacct lists (an array's tasks)."""
    out: dict[int, list[int]] = {i: [] for i in tasks}
    for job_id, t in truth.items():
        owner = t["array_job_id"] or job_id
        if owner in out:
            out[owner].append(job_id)
    return out


def _wait_settled(rig: Rig, tasks: dict[int, int], timeout: float = 900) -> None:
    """Until sacct lists every submitted run, Slurm ended each, and cc-backend and NATS
    hold every started run."""
    until = time.time() + timeout
    while time.time() < until:
        truth = sacct_truth(rig.cluster, list(tasks)) if tasks else {}
        listed = _listed(truth, tasks)
        if all(len(listed[i]) >= n for i, n in tasks.items()) and \
                all(t["state"] in TERMINAL for t in truth.values()):
            runs = {(j, t["start"]) for j, t in truth.items() if ran(t)}
            stopped = {(b["jobId"], b["startTime"]) for b in rig.cc.stopped()}
            published = {(k[1], k[2]) for k in _nats_keys(rig.nats.url) if k[0] == "stop_job"}
            if runs <= stopped and runs <= published:
                time.sleep(3)  # stragglers (a duplicate on its way) still count
                return
        time.sleep(3)


def _nats_keys(url: str) -> list[tuple[str, int, int]]:
    keys = []
    for data in stream_messages(url):
        point = parse_line(data.decode())
        body = json.loads(point.fields["event"])
        keys.append((point.tags["function"], body["jobId"], body["startTime"]))
    return keys


def _count(rig: Rig, churn: Churn, plan: list[tuple[str, float]],
           allocs: dict[int, Allocation]) -> dict[str, Tally]:
    """Every id sbatch returned, and every task of an array, is one job of the fault it was
    submitted during (or in the quiet time after); sacct says what became of it."""
    owner = {"normal": "normal"}
    for name, _ in plan:
        owner[name] = owner[f"after {name}"] = name
    truth = sacct_truth(rig.cluster, list(churn.tasks)) if churn.tasks else {}
    listed = _listed(truth, churn.tasks)
    received = _Received.read(rig)
    tallies: dict[str, Tally] = {}
    for phase, ids in churn.ids.items():
        tally = tallies.setdefault(owner[phase], Tally())
        for sid in ids:
            missing = churn.tasks[sid] - len(listed[sid])
            if missing > 0:  # submitted, yet not in Slurm's accounting: lost to cc-backend
                tally.jobs += missing
                tally.lost += missing
                tally.unaccounted += missing
                seen = "ran" if sid in allocs else "not seen running by slurmctld"
                tally.problems.append(f"job {sid}: {missing} of {churn.tasks[sid]} runs "
                                      f"never listed by sacct ({seen})")
            for job_id in listed[sid]:
                tally.jobs += 1
                received.check(rig.cluster.name, job_id, truth[job_id], allocs.get(job_id),
                               tally)
    received.check_extras(truth, tallies.setdefault("normal", Tally()))
    return tallies


@dataclass
class _Received:
    starts: dict[tuple[int, int], list[dict]]
    stops: dict[tuple[int, int], list[dict]]
    start_requests: dict[int, int]  # start_job answered 422 (already there), by job
    nats: dict[tuple[str, int, int], list[dict]]

    @classmethod
    def read(cls, rig: Rig) -> _Received:
        requests: dict[int, int] = {}
        for r in rig.cc.requests("/api/jobs/start_job/"):
            if r.status == 422 and isinstance(r.body, dict) and "jobId" in r.body:
                requests[r.body["jobId"]] = requests.get(r.body["jobId"], 0) + 1
        nats: dict[tuple[str, int, int], list[dict]] = {}
        for data in stream_messages(rig.nats.url):
            point = parse_line(data.decode())
            body = json.loads(point.fields["event"])
            key = (point.tags["function"], body["jobId"], body["startTime"])
            nats.setdefault(key, []).append(body)
        rig.cc.wait_committed()  # what cc-backend holds, through its API
        return cls(by_run(rig.cc.started(rig.cluster.name)),
                   by_run(rig.cc.stopped(rig.cluster.name)), requests, nats)

    def check(self, cluster: str, job_id: int, t: dict, alloc: Allocation | None,
              tally: Tally) -> None:
        if not ran(t):  # never ran: nothing may be sent
            if any(k[0] == job_id for k in self.starts):
                tally.wrong += 1
                tally.problems.append(f"job {job_id}: never started but sent")
            return
        run = (job_id, t["start"])
        starts, stops = self.starts.get(run, []), self.stops.get(run, [])
        tally.resends += self.start_requests.get(job_id, 0)
        if not starts or not stops:
            tally.lost += 1
            tally.problems.append(f"job {job_id}: {len(starts)} starts, {len(stops)} stops")
        if len(starts) > 1 or len(stops) > 1:
            tally.duplicated += 1
            tally.problems.append(f"job {job_id}: {len(starts)} starts, {len(stops)} stops")
        wrong, unverified, forgotten = self._compare(cluster, job_id, t, alloc, starts[:1],
                                                     stops[:1])
        if forgotten:
            tally.gpu_forgotten += 1
            tally.problems.append(f"job {job_id}: {'; '.join(forgotten)}")
        if wrong:
            tally.wrong += 1
            tally.problems.append(f"job {job_id}: {'; '.join(wrong)}")
        if unverified:
            tally.unverified += 1
            tally.problems.append(f"job {job_id}: {'; '.join(unverified)}")
        self._check_nats(cluster, job_id, t, alloc, tally)

    def _check_nats(self, cluster: str, job_id: int, t: dict, alloc: Allocation | None,
                    tally: Tally) -> None:
        """Each of start and stop once on NATS, with Slurm's values (as on REST)."""
        copies = {fn: self.nats.get((fn, job_id, t["start"]), [])
                  for fn in ("start_job", "stop_job")}
        for fn, got in copies.items():
            if not got:
                tally.nats_lost += 1
                tally.problems.append(f"job {job_id}: no {fn} on NATS")
            elif len(got) > 1:
                tally.nats_duplicated += 1
                tally.problems.append(f"job {job_id}: {len(got)} {fn} on NATS")
        wrong, _, _ = self._compare(cluster, job_id, t, alloc, copies["start_job"][:1],
                                    copies["stop_job"][:1])
        if wrong:
            tally.nats_wrong += 1
            tally.problems.append(f"job {job_id}: NATS {'; '.join(wrong)}")

    @staticmethod
    def _compare(cluster: str, job_id: int, t: dict, alloc: Allocation | None,
                 starts: list[dict], stops: list[dict]
                 ) -> tuple[list[str], list[str], list[str]]:
        """(wrong, unverified, forgotten) of the first start and stop received."""
        wrong: list[str] = []
        unverified: list[str] = []
        forgotten: list[str] = []
        for body in starts:
            v = check_start(body, cluster, job_id, t, alloc)
            wrong += v.wrong
            unverified += v.unverified
            forgotten += v.forgotten
        for body in stops:
            wrong += check_stop(body, cluster, job_id, t).wrong
        return wrong, unverified, forgotten

    def check_extras(self, truth: dict[int, dict], tally: Tally) -> None:
        """A run cc-backend holds that Slurm never had (e.g. a wrong startTime) is a
        duplicate."""
        real = {(j, t["start"]) for j, t in truth.items()}
        for run in self.starts:
            if run[0] in truth and run not in real:
                tally.duplicated += 1
                tally.problems.append(f"job {run[0]}: a run starting {run[1]} Slurm never had")
