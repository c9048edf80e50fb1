"""What cc-backend must hold of one run, from Slurm's own answer, field by field.

The expected values come from Slurm as the test helpers read it (``sacct -P`` text and
``scontrol show job -d`` text, parsed in tests/integration/workload.py), never from
ccadapter's collector, parsers or model: a field the product derives wrongly differs here.
The same checks serve the bodies cc-backend received over REST (the stand-in) and those
NATS carried.

Fields compared, for each run Slurm started (sacct Start and NodeList set):

- start: ``jobId``, ``cluster``, ``user`` (User), ``project`` (Account), ``partition``,
  ``walltime`` (TimelimitRaw minutes x 60; absent for no limit), ``numNodes`` (NNodes),
  ``numHwthreads`` (AllocCPUS), ``numAcc`` (``gres/gpu`` of AllocTRES), ``arrayJobId``,
  ``startTime`` (Start), ``metaData.jobName`` (JobName), ``resources``: the hostnames in
  NodeList's order, per host the ``hwthreads`` (scontrol's CPU_IDs) and the
  ``accelerators`` (scontrol's GPU IDX, as strings: the matrix sets no gpuPciAddrs);
- stop: ``jobId``, ``cluster``, ``startTime``, ``stopTime`` (End), ``jobState`` (the
  cc-backend name of sacct's State).

Where slurmdbd holds only a placeholder for a job (``dbd_placeholder``: its start message
was lost while slurmdbd was down), the name and partition are slurmctld's, as a test read
them while slurmctld held the job; not read, they are *unverified*.

A heterogeneous job is one run under its leader's id (``workload.het_merged`` restates the
README's rules from sacct's text), with ``metaData.hetJobComponents`` naming its components;
no component may be sent under its own id.

CPU ids and GPU indices are known only for runs whose allocation a test read from
slurmctld (GPU indices only while the run ran) or, for GPU indices, that the job itself
reported (``workload.GPU_REPORT``: ``SLURM_JOB_GPUS``, as slurmd set it); where neither
happened, those two are *unverified* (counted, never silently passed).

slurmctld forgets a job's GPU indices when it ends (its CPU ids it keeps for MinJobAge;
slurmdbd never stores either). A GPU run that started and ended while the daemon could not
read Slurm (killed, its disk full) reaches cc-backend without GPU ids although Slurm had
them. That is told apart from a wrong answer by what the daemon itself read: the
``metaData.slurmInfo`` it sent is slurmctld's record at that moment; when it shows the run
ended already (or is absent: slurmctld no longer held the job), the missing ids are
*forgotten* (counted, shown, not wrong); when it shows the run still running, they are wrong.
Likewise a run read after slurmctld forgot it (MinJobAge after its end, e.g. ``sync --once``
over an old window): no ``slurmInfo``, no CPU ids, which are *forgotten* too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tests.integration.workload import Allocation

# sacct's State (first word: "CANCELLED by 0") -> cc-backend's jobState (cc-lib
# schema.JobState); written out here rather than imported from the product.
CC_STATE = {
    "COMPLETED": "completed", "FAILED": "failed", "CANCELLED": "cancelled",
    "TIMEOUT": "timeout", "NODE_FAIL": "node_fail", "OUT_OF_MEMORY": "out_of_memory",
    "PREEMPTED": "preempted", "BOOT_FAIL": "boot_fail", "DEADLINE": "deadline",
}


def ran(t: dict) -> bool:
    """Did Slurm start this run (a start time and nodes)?"""
    return bool(t["start"] and t["nodes"])


@dataclass
class Verdict:
    """The differences found in one body, and what could not be checked."""

    wrong: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)  # GPU ids gone before it was read


def check_start(body: dict[str, Any], cluster: str, job_id: int, t: dict,
                alloc: Allocation | None) -> Verdict:
    """Compare one start_job body with Slurm's answer for run ``(job_id, t["start"])``."""
    v = Verdict()
    t = _named_by_controller(t, alloc, v)
    want: dict[str, Any] = {
        "jobId": job_id, "cluster": cluster, "user": t["user"], "project": t["account"],
        "partition": t["partition"], "numNodes": t["nnodes"], "numHwthreads": t["cpus"],
        "numAcc": t["gpus"], "arrayJobId": t["array_job_id"], "startTime": t["start"],
        "walltime": t["timelimit_min"] * 60 if t["timelimit_min"] else None,
    }
    for key, value in want.items():
        if body.get(key) != value and not (key == "partition" and value is None):
            v.wrong.append(f"{key} {body.get(key)!r} != Slurm's {value!r}")
    if "components" in t:  # a het job (workload.het_merged): its components named
        want_parts = ",".join(f"{job_id}+{off}={comp}" for comp, off in t["components"].items())
        got_parts = (body.get("metaData") or {}).get("hetJobComponents")
        if got_parts != want_parts:
            v.wrong.append(f"metaData.hetJobComponents {got_parts!r} != Slurm's {want_parts!r}")
    name = (body.get("metaData") or {}).get("jobName")
    if t["name"] is not None and name != t["name"]:
        v.wrong.append(f"metaData.jobName {name!r} != Slurm's {t['name']!r}")
    resources = body.get("resources") or []
    hosts = tuple(r.get("hostname") for r in resources)
    if hosts != t["nodes"]:
        v.wrong.append(f"hosts {hosts} != Slurm's {t['nodes']}")
        return v
    _check_allocation(v, resources, t, alloc, _read_running(body), _held(body))
    return v


def dbd_placeholder(t: dict) -> bool:
    """Is sacct's row slurmdbd's placeholder for a job whose start message never reached it?
    slurmctld sends a job's start to slurmdbd from a periodic thread; when slurmdbd is down
    then and the job ends before it is back, slurmdbd makes the record from the job's
    completion message, which carries no name or partition, and as_mysql_job_start()
    (src/plugins/accounting_storage/mysql/as_mysql_job.c) names a nameless job
    "allocation". Seen on 22.05 (CI, job 5807: `DBD_SEND_MULT_JOB_START failure` in
    slurmctld.log, sacct then printing JobName "allocation" and no Partition)."""
    return t["name"] == "allocation" and t["partition"] == ""


def _named_by_controller(t: dict, alloc: Allocation | None, v: Verdict) -> dict:
    """``t`` with slurmctld's name and partition where slurmdbd holds only a placeholder
    (``dbd_placeholder``): slurmctld is Slurm's other answer, read while it held the job. Not
    read there: both are *unverified* (None here) rather than compared with a placeholder."""
    if not dbd_placeholder(t):
        return t
    if alloc is not None and alloc.name is not None:
        return {**t, "name": alloc.name, "partition": alloc.partition}
    v.unverified.append("jobName, partition: slurmdbd holds a placeholder, slurmctld not read")
    return {**t, "name": None, "partition": None}


_INFO_STATE = re.compile(r"\bJobState=(\S+)")


def _read_running(body: dict[str, Any]) -> bool:
    """Did the daemon read this run from slurmctld while it still ran (its slurmInfo)?"""
    found = _INFO_STATE.search((body.get("metaData") or {}).get("slurmInfo", ""))
    return bool(found) and found[1] in ("RUNNING", "CONFIGURING", "SUSPENDED")


def _held(body: dict[str, Any]) -> bool:
    """Did slurmctld still hold the run when the daemon read it (a slurmInfo was sent)?"""
    return bool((body.get("metaData") or {}).get("slurmInfo"))


def _check_allocation(v: Verdict, resources: list[dict], t: dict,
                      alloc: Allocation | None, read_running: bool, held: bool) -> None:
    sent_cpus = {r["hostname"]: tuple(r.get("hwthreads") or ()) for r in resources}
    sent_gpus = {r["hostname"]: tuple(r.get("accelerators") or ()) for r in resources}
    if alloc is None or set(alloc.cpus) != set(t["nodes"]):
        v.unverified.append("hwthreads: slurmctld's CPU ids were not read")
    elif not any(sent_cpus.values()) and not held:
        # read after slurmctld forgot the job (MinJobAge after its end; slurmdbd never has
        # CPU ids): e.g. `sync --once` over a window that ended long ago
        v.forgotten.append(f"hwthreads: none sent, slurmctld's {alloc.cpus} were gone when "
                           "the daemon read the run")
    elif sent_cpus != alloc.cpus:
        v.wrong.append(f"hwthreads {sent_cpus} != slurmctld's {alloc.cpus}")
    if not t["gpus"]:  # no GPU in the allocation: none may be named
        if any(sent_gpus.values()):
            v.wrong.append(f"accelerators {sent_gpus} for a run without GPUs")
    elif alloc is None or alloc.gpus is None:
        v.unverified.append("accelerators: the run was not seen running")
    else:
        want = {h: tuple(str(i) for i in alloc.gpus.get(h, ())) for h in t["nodes"]}
        if sent_gpus == want:
            return
        if not any(sent_gpus.values()) and not read_running:
            v.forgotten.append(f"accelerators: none sent, slurmctld's {want} were gone "
                               "when the daemon read the run")
        else:
            v.wrong.append(f"accelerators {sent_gpus} != slurmctld's {want}")


def check_stop(body: dict[str, Any], cluster: str, job_id: int, t: dict) -> Verdict:
    """Compare one stop_job body with Slurm's answer for the run."""
    v = Verdict()
    want = {"jobId": job_id, "cluster": cluster, "startTime": t["start"],
            "stopTime": t["end"], "jobState": CC_STATE.get(t["state"], f"? {t['state']}")}
    for key, value in want.items():
        if body.get(key) != value:
            v.wrong.append(f"stop {key} {body.get(key)!r} != Slurm's {value!r}")
    return v


def by_run(bodies: list[dict]) -> dict[tuple[int, int], list[dict]]:
    """Bodies by (jobId, startTime), in the order received."""
    out: dict[tuple[int, int], list[dict]] = {}
    for b in bodies:
        out.setdefault((b["jobId"], b["startTime"]), []).append(b)
    return out


def lost_and_duplicated(truth: dict[int, dict], starts: dict[tuple[int, int], list[dict]],
                        stops: dict[tuple[int, int], list[dict]]) -> tuple[int, int]:
    """How many runs Slurm started lack a start or a stop (lost), and how many got either
    more than once (duplicated); ``starts``/``stops`` as :func:`by_run` groups them."""
    lost = duplicated = 0
    for job_id, t in truth.items():
        if ran(t):
            run = (job_id, t["start"])
            got = len(starts.get(run, [])), len(stops.get(run, []))
            lost += min(got) == 0
            duplicated += max(got) > 1
    return lost, duplicated


def delivery_problems(cluster: str, truth: dict[int, dict],
                      starts: dict[tuple[int, int], list[dict]],
                      stops: dict[tuple[int, int], list[dict]],
                      allocs: dict[int, Allocation], *, where: str = "",
                      strict_allocation: bool = False) -> list[str]:
    """Every run Slurm started arrived once as started and once as stopped, each with
    Slurm's values; a job Slurm never started was not sent; no run Slurm never had was
    sent. ``strict_allocation``: an unverified CPU-id/GPU check is a problem too."""
    problems = []
    for job_id, t in truth.items():
        for comp in list(t.get("components", {}))[1:]:  # a het job is sent under its leader
            if any(k[0] == comp for k in [*starts, *stops]):
                problems.append(f"{where}job {comp}: a component of het job {job_id} sent "
                                "alone")
        if not ran(t):
            if any(k[0] == job_id for k in starts):
                problems.append(f"{where}job {job_id}: never started but sent")
            continue
        run = (job_id, t["start"])
        got_starts, got_stops = starts.get(run, []), stops.get(run, [])
        if len(got_starts) != 1 or len(got_stops) != 1:
            problems.append(f"{where}job {job_id}: {len(got_starts)} starts, "
                            f"{len(got_stops)} stops")
        if got_starts:
            v = check_start(got_starts[0], cluster, job_id, t, allocs.get(job_id))
            problems += [f"{where}job {job_id}: {p}" for p in v.wrong]
            if strict_allocation:
                problems += [f"{where}job {job_id}: {p}" for p in v.unverified]
        if got_stops:
            problems += [f"{where}job {job_id}: {p}"
                         for p in check_stop(got_stops[0], cluster, job_id, t).wrong]
    real = {(j, t["start"]) for j, t in truth.items()}
    for run in starts:
        if run[0] in truth and run not in real:
            problems.append(f"{where}job {run[0]}: a run starting {run[1]} Slurm never had")
    return problems
