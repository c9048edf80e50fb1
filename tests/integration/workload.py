"""The workload mix, submitted to a real test-bed cluster, and Slurm's own view of it.

Used by the integration tests and by ``tests/testbed/record-fixtures``. Slurm's truth is
read here with commands and formats the product does not use (``sacct -P`` text, one
``scontrol show job -d ID`` per job), so a test compares two independent readings.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import hostlist

from ccadapter.reconcilers.activity import ran_during
from ccadapter.slurm.formats.listing import ENDED

TESTBED = Path(__file__).resolve().parents[1] / "testbed" / "slurm"

# name -> sbatch arguments. Scripts print quotes, commas and a non-UTF-8 byte on purpose.
WORKLOAD: dict[str, list[str]] = {
    "complete": ["-N1", "-n2", "--wrap", "sleep 4"],
    "fail": ["--wrap", "sleep 2; exit 3"],
    "multinode": ["-N2", "-n4", "--wrap", "sleep 8"],
    # runs long enough to overlap "hetjob", which only the backfill scheduler starts
    "gpujob": ["-p", "gpu", "--gres=gpu:tesla:1", "--wrap", "sleep 60"],
    # a heterogeneous job: a GPU component (the leader) and one of two CPUs; the backfill
    # scheduler, which alone starts het jobs, gives each component nodes of its own
    "hetjob": ["-n1", "-p", "gpu", "--gres=gpu:tesla:1", ":", "-n2", "-p", "debug",
               "--wrap", "sleep 30"],
    "arr": ["--array=1-3", "--wrap", "sleep 3"],
    "cancelpend": ["--begin=now+3600", "--wrap", "sleep 1"],
    "cancelrun": ["--wrap", "sleep 300"],  # also holds its node for "cancelqueued"
    "timeout": ["-t", "1", "--wrap", "sleep 300"],
    "excl": ["--exclusive", "--wrap", "sleep 4"],
}
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


@dataclass(frozen=True)
class Cluster:
    name: str
    version: str
    prefix: tuple[str, ...]
    nodes: tuple[str, ...]
    gpu_node: str
    hook_socket: str = ""  # where slurmctld's Prolog/Epilog hook sends (tcp:HOST:PORT)
    slurm_conf: str = ""  # the host path of its slurm.conf
    hook_also: str = ""  # where a second Prolog/Epilog program runs beside the hook
    hook_stamps: str = ""  # where the hook wrapper notes when slurmctld ran it
    smt_nodes: tuple[str, ...] = ()  # nodes 3 and 4 (of ``nodes``), SMT, partition "topo"

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> str:
        proc = subprocess.run([*self.prefix, *argv], capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
        out = proc.stdout.decode("utf-8", "replace")
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: rc={proc.returncode} "
                               f"{proc.stderr.decode('utf-8', 'replace')}")
        return out

    @property
    def short(self) -> str:
        return self.version.rsplit(".", 1)[0]


def testbed_clusters() -> list[Cluster]:
    out = subprocess.run([str(TESTBED), "info"], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, check=False)
    if out.returncode != 0:
        return []
    return [Cluster(c["cluster"], c["version"], tuple(c["prefix"]), tuple(c["nodes"]),
                    c["gpu_node"], c.get("hook_socket", ""), c.get("slurm_conf", ""),
                    c.get("hook_also", ""), c.get("hook_stamps", ""),
                    tuple(c.get("smt_nodes", ())))
            for c in json.loads(out.stdout)]


def record_on_each(description: str, record: Callable[[Cluster], Any]) -> None:
    """A recording script's command line (``--versions 22.05,...``, default: every cluster
    up): ``record`` on each chosen cluster at once, what each returns printed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--versions", default="")
    wanted = set(filter(None, parser.parse_args().versions.split(",")))
    clusters = [c for c in testbed_clusters() if not wanted or c.short in wanted]
    with ThreadPoolExecutor(len(clusters)) as pool:
        for out in pool.map(record, clusters):
            print(*(out if isinstance(out, list) else [out]))


@dataclass
class Submitted:
    cluster: Cluster
    ids: dict[str, list[int]] = field(default_factory=dict)  # name -> raw job ids
    submitted_at: float = 0.0
    truth_cpus: dict[int, dict[str, tuple[int, ...]]] = field(default_factory=dict)
    truth_gpus: dict[int, dict[str, tuple[int, ...]]] = field(default_factory=dict)
    truth_named: dict[int, tuple[str, str]] = field(default_factory=dict)  # name, partition
    controller_text: dict[int, str] = field(default_factory=dict)

    def all_ids(self) -> list[int]:
        return sorted(i for ids in self.ids.values() for i in ids)


def submit(cluster: Cluster) -> Submitted:
    sub = Submitted(cluster, submitted_at=time.time())
    for name, args in WORKLOAD.items():
        out = cluster.run("sbatch", "--parsable", "-J", name, "-o", "/dev/null", *args)
        sub.ids[name] = [int(out.strip().split(";")[0])]
        if ":" in args:
            sub.ids[name] = het_ids(cluster, sub.ids[name][0])
    return sub


def cancel_leftovers(cluster: Cluster, timeout: float = 90) -> list[int]:
    """Cancel every job an earlier, interrupted test run left on the cluster and wait until
    none runs: a leftover would hold nodes the tests' jobs need and show up in what the
    tests read from slurmctld. Returns the ids cancelled."""
    ids = [int(i) for i in cluster.run("squeue", "-h", "-o", "%A", check=False).split()]
    if not ids:
        return []
    cluster.run("scancel", *map(str, ids), check=False)
    until = time.time() + timeout
    while cluster.run("squeue", "-h", "-o", "%A", check=False).split():
        if time.time() > until:
            raise TimeoutError(f"{cluster.name}: jobs left from an earlier run did not end "
                               f"in {timeout} s after scancel")
        time.sleep(0.5)
    return ids


def het_ids(cluster: Cluster, leader: int) -> list[int]:
    """Every component's job id of a het job, as slurmctld says (``HetJobIdSet=11-12``)."""
    out = cluster.run("scontrol", "show", "job", str(leader))
    m = re.search(r"HetJobIdSet=(\S+)", out)
    if not m:
        raise RuntimeError(f"{cluster.name}: job {leader} is no het job: {out[:200]}")
    return list(_ids(m[1]))


def _squeue_state(cluster: Cluster, job_id: int) -> str:
    """The job's state; squeue prints a line per component for a het job's leader (they
    start together): the first one."""
    out = cluster.run("squeue", "-h", "-j", str(job_id), "-o", "%T", check=False).split()
    return out[0] if out else ""


def wait_running(cluster: Cluster, job_id: int, timeout: float = 60) -> None:
    until = time.time() + timeout
    while _squeue_state(cluster, job_id) != "RUNNING":
        if time.time() > until:
            raise TimeoutError(f"{cluster.name}: job {job_id} did not start in {timeout} s")
        time.sleep(0.5)


def drive(sub: Submitted, deadline: float = 300,
          while_busy: Callable[[Submitted], None] | None = None) -> None:
    """Cancel the cancel jobs at the right moments, read slurmctld's allocation of every
    running job, and wait until sacct shows all of them ended. ``while_busy`` is called
    once while the GPU job and the het job run (GPU indices exist only then)."""
    c = sub.cluster
    c.run("scancel", str(sub.ids["cancelpend"][0]))
    until = time.time() + deadline
    cancelled = busy_seen = False
    while time.time() < until:
        if not busy_seen and all(_squeue_state(c, sub.ids[name][0]) == "RUNNING"
                                 for name in ("gpujob", "hetjob") if name in sub.ids):
            # the GPU jobs run 60 and 30 s: GPU indices can be read only while they run
            capture_running(sub)
            if while_busy:
                while_busy(sub)
            busy_seen = True
        if not cancelled and _squeue_state(c, sub.ids["cancelrun"][0]) == "RUNNING":
            _cancel_queued_behind(sub)
            capture_running(sub)
            c.run("scancel", str(sub.ids["cancelrun"][0]))
            cancelled = True
        capture_running(sub)
        states = sacct_truth(c, sub.all_ids(), expand_arrays=True)
        names = {r["name"] for r in states.values()}
        if cancelled and busy_seen and len(states) >= len(sub.all_ids()) + 2 and \
                names >= set(sub.ids) and all(
            r["state"] in TERMINAL for r in states.values()
        ):
            sub.ids["arr"] = sorted(j for j, r in states.items() if r["name"] == "arr")
            return
        time.sleep(2)
    raise TimeoutError(f"{c.name}: workload did not finish in {deadline} s: {states}")


def _cancel_queued_behind(sub: Submitted) -> None:
    """A job cancelled while pending but eligible (so sacct windows list it): it asks for
    the node that "cancelrun" occupies, exclusively, and is cancelled while it waits."""
    c = sub.cluster
    node = c.run("squeue", "-h", "-j", str(sub.ids["cancelrun"][0]), "-o", "%N").strip()
    out = c.run("sbatch", "--parsable", "-J", "cancelqueued", "-o", "/dev/null", "-w", node,
                "--exclusive", "--wrap", "true")
    job_id = int(out.strip().split(";")[0])
    sub.ids["cancelqueued"] = [job_id]
    for _ in range(30):
        reason = c.run("squeue", "-h", "-j", str(job_id), "-o", "%T %r", check=False).split()
        if reason[:1] == ["PENDING"] and reason[1:] != ["None"]:
            break
        time.sleep(0.5)
    time.sleep(1)
    c.run("scancel", str(job_id))


def capture_running(sub: Submitted) -> None:
    """Slurm's allocation of every job running now and not captured yet, by job id (each
    component of a het job on its own)."""
    out = sub.cluster.run("squeue", "-h", "-o", "%A %T", check=False)
    for line in out.splitlines():
        job_id, state = line.split()
        if state in ("RUNNING", "COMPLETING") and int(job_id) not in sub.truth_cpus:
            _capture(sub, int(job_id))


_DETAIL = re.compile(r"Nodes=(\S+) CPU_IDs=(\S+) Mem=\S+ GRES=(\S*)")
_JOB_ID = re.compile(r"^JobId=(\d+) ")
_STATE = re.compile(r"\bJobState=(\S+)")
_NAME = re.compile(r"^JobId=\d+ JobName=(.*)$", re.M)
_PARTITION = re.compile(r"\bPartition=(\S*)")


@dataclass(frozen=True)
class ControllerRecord:
    """One job of ``scontrol show job -d`` as read here (not by the product's parser)."""

    job_id: int
    state: str
    cpus: dict[str, tuple[int, ...]]  # host -> CPU_IDs, in slurmctld's node order
    gpus: dict[str, tuple[int, ...]]  # host -> GPU IDX (only while the job runs)
    text: str
    name: str = ""
    partition: str = ""


def controller_records(out: str) -> dict[int, ControllerRecord]:
    """Every job record of ``scontrol show job -d [ID]`` output, by job id."""
    found: dict[int, ControllerRecord] = {}
    for text in re.split(r"\n\s*\n", out):
        head = _JOB_ID.match(text.strip())
        if not head:
            continue
        cpus: dict[str, tuple[int, ...]] = {}
        gpus: dict[str, tuple[int, ...]] = {}
        for nodes, cpu_ids, gres in _DETAIL.findall(text):
            for host in hostlist.expand_hostlist(nodes):
                cpus[host] = _ids(cpu_ids)
                m = re.search(r"IDX:([0-9,-]+)", gres)
                gpus[host] = _ids(m[1]) if m else ()
        state, name, part = _STATE.search(text), _NAME.search(text), _PARTITION.search(text)
        found[int(head[1])] = ControllerRecord(int(head[1]), state[1] if state else "",
                                               cpus, gpus, text.strip(),
                                               name[1] if name else "",
                                               part[1] if part else "")
    return found


def _capture(sub: Submitted, job_id: int) -> None:
    """Slurm's own statement of a running job's CPUs and GPUs: ``scontrol show job -d ID``."""
    out = sub.cluster.run("scontrol", "show", "job", "-d", str(job_id), check=False)
    # For an array's own id scontrol prints every task: keep this job's record only.
    rec = controller_records(out).get(job_id)
    if rec and rec.cpus:
        sub.truth_cpus[job_id] = rec.cpus
        sub.truth_gpus[job_id] = rec.gpus
        sub.truth_named[job_id] = (rec.name, rec.partition)
        sub.controller_text[job_id] = rec.text


@dataclass(frozen=True)
class Allocation:
    """slurmctld's statement of one run's CPUs and GPUs, for comparing what cc-backend got.
    ``gpus`` is None when the run was never seen running: slurmctld drops the GPU indices
    when a job ends (its CPU ids it keeps for MinJobAge). ``name`` and ``partition`` are
    slurmctld's too (None: not read): the truth where slurmdbd holds only a placeholder
    record (expect.py, ``dbd_placeholder``)."""

    cpus: dict[str, tuple[int, ...]]
    gpus: dict[str, tuple[int, ...]] | None
    name: str | None = None
    partition: str | None = None


class AllocationWatcher(threading.Thread):
    """Reads ``scontrol show job -d`` (every job slurmctld holds) every ``every`` seconds
    while a test runs, and keeps each job's CPU ids and, from a moment it ran, its GPU
    indices: the truth for jobs that end long before the comparison (after MinJobAge
    slurmctld forgets them)."""

    def __init__(self, cluster: Cluster, every: float = 2.0) -> None:
        super().__init__(name=f"alloc-{cluster.name}", daemon=True)
        self.cluster, self.every = cluster, every
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._cpus: dict[int, dict[str, tuple[int, ...]]] = {}
        self._gpus: dict[int, dict[str, tuple[int, ...]]] = {}
        self._named: dict[int, tuple[str, str]] = {}

    def run(self) -> None:
        while not self._halt.is_set():
            self.read_once()
            self._halt.wait(self.every)

    def read_once(self) -> None:
        try:
            out = self.cluster.run("scontrol", "show", "job", "-d", check=False, timeout=30)
        except subprocess.TimeoutExpired:
            return  # slurmctld down or restarting: the next read catches up
        with self._lock:
            for rec in controller_records(out).values():
                if rec.cpus:
                    self._cpus[rec.job_id] = rec.cpus
                    self._named[rec.job_id] = (rec.name, rec.partition)
                    if rec.state == "RUNNING":
                        self._gpus[rec.job_id] = rec.gpus

    def stop(self) -> None:
        self._halt.set()
        self.join(60)

    def allocations(self) -> dict[int, Allocation]:
        with self._lock:
            return {j: Allocation(c, self._gpus.get(j), *self._named[j])
                    for j, c in self._cpus.items()}


# A batch job's first line: the node and the global GPU indices Slurm gave it
# (SLURM_JOB_GPUS, "0,1"; set by slurmd in batch jobs of 22.05, 24.11 and 26.05 alike).
GPU_REPORT = 'echo "$SLURMD_NODENAME|$SLURM_JOB_GPUS"'


def reported_gpus(folder: Path) -> dict[int, dict[str, tuple[int, ...]]]:
    """Job id -> {node: GPU indices} from the ``<job id>`` files GPU_REPORT wrote (the
    job's stdout). A file still empty (the job never began) says nothing."""
    found: dict[int, dict[str, tuple[int, ...]]] = {}
    for path in folder.iterdir() if folder.is_dir() else ():
        first = path.read_text().partition("\n")[0]
        node, sep, ids = first.partition("|")
        if path.name.isdigit() and sep and node:
            found[int(path.name)] = {node: tuple(int(i) for i in ids.split(",") if i)}
    return found


def with_reported_gpus(allocs: dict[int, Allocation],
                       reported: dict[int, dict[str, tuple[int, ...]]]) -> dict[int, Allocation]:
    """The watcher's allocations, with the GPU indices a job reported itself where the
    watcher never saw it running (slurmctld down, or slow to answer, for all of its run)."""
    merged = dict(allocs)
    for job_id, gpus in reported.items():
        alloc = merged.get(job_id)
        if alloc is None:
            merged[job_id] = Allocation({}, gpus)
        elif alloc.gpus is None:
            merged[job_id] = replace(alloc, gpus=gpus)
    return merged


def controller_allocations(cluster: Cluster) -> dict[int, Allocation]:
    """What slurmctld still holds now (jobs that ended within MinJobAge): CPU ids of all,
    GPU indices of those still running."""
    watcher = AllocationWatcher(cluster)
    watcher.read_once()
    return watcher.allocations()


def submitted_allocations(sub: Submitted) -> dict[int, Allocation]:
    """The allocations :func:`drive` captured while the workload's jobs ran."""
    return {j: Allocation(c, sub.truth_gpus.get(j), *sub.truth_named.get(j, (None, None)))
            for j, c in sub.truth_cpus.items()}


def _ids(spec: str) -> tuple[int, ...]:
    return tuple(int(x[1:]) for x in hostlist.expand_hostlist(f"x[{spec}]"))


SACCT_FIELDS = ("JobIDRaw,JobID,JobName,State,Submit,Start,End,NodeList,AllocCPUS,User,Account,"
                "Partition,TimelimitRaw,NNodes,AllocTRES")


def sacct_truth(cluster: Cluster, ids: list[int], expand_arrays: bool = False) -> dict[int, dict]:
    """sacct's parsable text (not the JSON the product reads), one row per job allocation.
    An array's id lists all its tasks, each under its own raw id; a het job's component has
    ``het_job_id`` (the leader's id) and ``het_offset`` (its JobID is ``LEADER+OFFSET``)."""
    out = cluster.run("sacct", "-X", "-P", "-n", "--duplicates", "-o", SACCT_FIELDS,
                      "-j", ",".join(map(str, ids)))
    rows: dict[int, dict] = {}
    for line in out.splitlines():
        (raw, jobid, name, state, submit, start, end, nodes, cpus, user, account, partition,
         limit, nnodes, tres) = line.split("|")
        if not raw.isdigit():
            continue
        arr, _, task = jobid.partition("_")  # "6_1" for array task 1 of array 6
        leader, plus, offset = jobid.partition("+")  # "11+1" for component 1 of het job 11
        rows[int(raw)] = {
            "name": name, "state": state.split(" ")[0], "submit": _epoch(submit),
            "start": _epoch(start), "end": _epoch(end),
            "nodes": tuple(hostlist.expand_hostlist(nodes)) if nodes not in (
                "None assigned", "") else (),
            "cpus": int(cpus or 0), "array_job_id": int(arr) if task.isdigit() else 0,
            "array_task_id": int(task) if task.isdigit() else None,
            "user": user, "account": account, "partition": partition,
            # minutes; None: no limit ("UNLIMITED", or "Partition_Limit" on some versions)
            "timelimit_min": int(limit) if limit.isdigit() else None,
            "nnodes": int(nnodes or 0), "gpus": _tres_count(tres, "gres/gpu"),
            "het_job_id": int(leader) if plus else 0,
            "het_offset": int(offset) if plus else None,
        }
    return rows


def listed_ended(cluster: Cluster, ids: list[int], since: float) -> set[int]:
    """Which of ``ids`` a poll's listing of ended runs names now: the product's own filter
    (``ENDED``: end states, runs that got nodes) over [since, now], read by the test. On
    22.05 slurmdbd can hold a just-ended job with no nodes for a few seconds (its start
    record comes with slurmctld's database-index pass, every 5 s, when the job started
    before it had an index), so ``sacct -j`` shows it ended while the filter leaves it out;
    a daemon lists it a poll later, a single ``sync --once`` must wait for it."""
    out = cluster.run("sacct", "-X", "-n", "-P", "--allusers", "--duplicates", *ENDED,
                      "--starttime", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since)),
                      "--endtime", "now", "-o", "JobIDRaw")
    listed = {int(line) for line in out.split() if line.isdigit()}
    return listed & set(ids)


def _tres_count(tres: str, name: str) -> int:
    """``billing=2,cpu=2,gres/gpu=1,mem=1000M,node=1`` -> the count of ``name`` (0: none)."""
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == name:
            return int(value)
    return 0


def het_merged(rows: dict[int, dict]) -> dict[int, dict]:
    """The rows with each het job's components as one row under the leader's id, as the
    README says cc-backend gets it: the leader's start; the last end (0 while a component
    runs); the leader's state unless it completed and another component did not (the first
    such, by offset); the hosts of every component in component order, each once; the CPUs
    summed. ``components`` maps each component's job id to its offset. A restatement of
    the rules from sacct's own text, independent of the product's code."""
    out: dict[int, dict] = {}
    groups: dict[int, list[tuple[int, dict]]] = {}
    for job_id, row in rows.items():
        if row["het_job_id"]:
            groups.setdefault(row["het_job_id"], []).append((job_id, row))
        else:
            out[job_id] = row
    for leader, parts in groups.items():
        parts.sort(key=lambda p: p[1]["het_offset"])
        lead = parts[0][1]
        states = [r["state"] for _, r in parts]
        running = [s for s in states if s not in TERMINAL]
        state = running[0] if running else states[0]
        if state == "COMPLETED":
            state = next((s for s in states if s != "COMPLETED"), state)
        ends = [r["end"] for _, r in parts]
        out[leader] = {
            **lead, "state": state, "end": 0 if running or 0 in ends else max(ends),
            "nodes": tuple(dict.fromkeys(h for _, r in parts for h in r["nodes"])),
            "cpus": sum(r["cpus"] for _, r in parts),
            # ARCHITECTURE.md "Heterogeneous jobs: the details": distinct hosts; GPUs summed;
            # the components' distinct partitions; the longest limit, none if one has none
            "nnodes": len(dict.fromkeys(h for _, r in parts for h in r["nodes"])),
            "gpus": sum(r["gpus"] for _, r in parts),
            "partition": ",".join(dict.fromkeys(r["partition"] for _, r in parts)),
            "timelimit_min": None if any(r["timelimit_min"] is None for _, r in parts)
            else max(r["timelimit_min"] for _, r in parts),
            "components": {job_id: r["het_offset"] for job_id, r in parts},
        }
    return out


def het_allocations(truth: dict[int, dict],
                    allocs: dict[int, Allocation]) -> dict[int, Allocation]:
    """``allocs`` with each het job's components' allocations joined under the leader's id
    (``truth`` from :func:`het_merged`): the CPU ids of every component's hosts, the GPU
    indices when every component's are known."""
    out = dict(allocs)
    for leader, t in truth.items():
        parts = [allocs.get(job_id) for job_id in t.get("components", {})]
        if not parts or any(a is None for a in parts):
            continue
        cpus: dict[str, tuple[int, ...]] = {}
        gpus: dict[str, tuple[int, ...]] | None = {}
        for a in parts:
            for host, ids in a.cpus.items():
                cpus[host] = tuple(sorted({*cpus.get(host, ()), *ids}))
            if gpus is not None and a.gpus is not None:
                for host, ids in a.gpus.items():
                    gpus[host] = tuple(sorted({*gpus.get(host, ()), *ids}))
            else:
                gpus = None
        out[leader] = Allocation(cpus, gpus, parts[0].name)  # partitions: see het_merged
    return out


def _epoch(text: str) -> int:
    if text in ("Unknown", "None", ""):
        return 0
    return int(time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))


# slurmctld's job list of running and suspended jobs (every job it holds is packed, then
# filtered: the full list the product no longer reads)
RUNNING_JOBS = ("squeue", "-h", "-t", "R,S", "-o", "%A|%i|%T")


def running_leaders(text: str) -> dict[int, int] | None:
    """:data:`RUNNING_JOBS`'s answer: each job's id -> its het job's leader's id (``%i``
    names a component ``LEADER+OFFSET``; other jobs map to themselves). None while a job is
    still CONFIGURING (its PrologSlurmctld runs: it has no step yet, and polls leave it to
    the hook or to the next cycle)."""
    ids = {}
    for line in text.split():
        raw, name, state = line.split("|")
        if state == "CONFIGURING":
            return None
        ids[int(raw)] = int(name.split("+")[0]) if "+" in name else int(raw)
    return ids


def slurm_running(cluster: Cluster) -> dict[int, int] | None:
    """The jobs slurmctld runs now, read by the test (:func:`running_leaders`)."""
    return running_leaders(cluster.run(*RUNNING_JOBS))


@dataclass
class Listings:
    """A window listed both ways at one moment: slurmdbd's RUNNING rule (``old``, started
    runs), the polls' ended runs and running jobs (``new``), slurmctld's step list
    (``steps``) and its job list (``running``)."""

    old: set[tuple[int, int]]
    new: set[tuple[int, int]]
    steps: set[int]
    running: dict[int, int]
    since: float
    ends: dict[tuple[int, int], int]  # the end of each run in ``new`` (0: runs)


def listings(cluster: Cluster, collector, since: float, tries: int = 10) -> Listings:
    """Both listings of [since, now], taken again until no job started or ended while they
    were taken (slurmdbd's listing the same before and after, slurmctld's job list too) and
    none was configuring."""
    def started(listing) -> set[tuple[int, int]]:
        return {s.run for s in listing.stamps if s.started}

    for _ in range(tries):
        before, running = started(collector.stamps(since)), slurm_running(cluster)
        new = ran_during(collector, since, None, lambda: [])
        steps = collector.slurmctld.running_ids()
        if running is not None and started(collector.stamps(since)) == before \
                and slurm_running(cluster) == running:
            return Listings(before, started(new), steps, running, since,
                            {s.run: s.end_time for s in new.stamps})
        time.sleep(0.5)
    raise AssertionError(f"{cluster.name}: jobs kept starting or ending for {tries} tries")
