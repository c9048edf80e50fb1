"""Lifecycles a site's Slurm gives a job, on real Slurm into the real cc-backend, by the hook
alone and by the poll alone (issue 46: the first rows of its matrix; TESTING.md has the table).

Each row is one job and what the test does to it while it runs or waits. Two daemons watch
every row's job, each into its own cc-backend: one listens for the cluster's hook and polls
every 10 minutes (what it gets came through the hook), the other polls every 5 s and hears no
hook. For each, cc-backend must hold one job per run that started (none for a job that never
ran), in the state Slurm's last record ends in, from the first record's start to the last
one's end, and have been sent one start (201) and one stop (200) for it, nothing refused.

- ``resize``: ``scontrol update JobId=.. NumNodes=1`` while it runs. slurmdbd splits it in two
  records (RESIZING, then one from the resize; 24.11 and 26.05 date the second from the
  resize): before issue 46, a second run refused by cc-backend and a first never stopped.
  Held with the two nodes it started with.
- ``suspend``: ``scontrol suspend``, 5 s later ``resume``. Its duration in cc-backend is the
  wall time from start to end, suspension included (Slurm's Elapsed leaves the suspension
  out, sacct's Suspended says how long; README).
- ``hold``: submitted held (``--hold``), released 3 s later: one run, from its release on.
- ``timelimit``: its time limit raised while it runs (``scontrol update TimeLimit=``).
- ``kill``: ``scancel --signal=KILL --full`` while it runs, the batch shell too (it ends as
  Slurm says: cancelled or failed).
- ``never``: a dependency that can never be met (``afterok`` on a job that failed), then
  ``scancel``: it never ran, so cc-backend holds nothing of it and was sent nothing.
- ``partition``: submitted held to "debug", moved to "gpu" (``scontrol update Partition=``),
  released: held in partition gpu.
- ``deadline``: waits for GPUs another job holds until its ``--deadline`` leaves no room for
  its time limit: slurmctld ends it DEADLINE without a run; nothing held, nothing sent.
- ``array``: ``--array=0-3%2``; ``scancel`` of task 1 while it runs and of tasks 2-3 while
  they wait: tasks 0 and 1 held (completed, cancelled), nothing of the rest.
- ``preempt-*`` and ``urgent``: partition-priority preemption (the test bed's slurm.conf):
  "urgent" asks for all of node 4 and preempts a job of each low partition, by its mode:
  REQUEUE (its first run held preempted, the second refused by cc-backend's one-run-a-day
  rule: one start, no stop; restarted at once with ``scontrol update StartTime=now`` instead
  of Slurm's two-minute requeue delay), CANCEL (held preempted), SUSPEND (resumed when
  "urgent" ends; held completed, suspension in its duration).
- ``node-fail``: its node (node 3, which no other row uses) set DOWN under it: ended NODE_FAIL,
  requeued (``--requeue``), the node resumed and the job restarted at once: its first run
  held node_fail, the second refused as a requeue's.
- ``requeue-hold``: ``scontrol requeuehold`` while it runs, ``release`` 2 s later (and
  restarted at once): its first run held preempted, the second refused as a requeue's.
- ``prolog-fails``: its first PrologSlurmctld fails (a site check the test bed's hook wrapper
  runs after ccadapter's hook): slurmctld requeues it (not held: ``job_requeue`` with no
  flags, src/slurmctld/prep_slurmctld.c) before its script ran; slurmdbd records a run of a
  second or less, REQUEUED, then the real one: held as any requeue (first run preempted, the
  second refused).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from ccadapter.runtime.lastrun import LastRun
from ccadapter.slurm.formats.records import ParseContext
from ccadapter.slurm.formats.scontrol import parse_scontrol_jobs
from ccadapter.slurm.formats.values import slurm_duration
from tests.ccbackend import START, STOP, CcBackend
from tests.conftest import VERSIONS
from tests.integration.conftest import each_at_once
from tests.integration.sync_scenario import DaemonProc, wait_for, write_config
from tests.integration.test_hook_live import start_daemon
from tests.integration.workload import Cluster

pytestmark = pytest.mark.integration

PATHS = ("hook", "poll")
CC_STATE = {"COMPLETED": "completed", "FAILED": "failed", "CANCELLED": "cancelled",
            "TIMEOUT": "timeout", "PREEMPTED": "preempted", "REQUEUED": "preempted",
            "REQUEUE_HOLD": "preempted", "NODE_FAIL": "node_fail", "DEADLINE": "deadline"}


@dataclass(frozen=True)
class Record:
    """One of slurmdbd's records of a job (``sacct -X --duplicates``), epoch times (0: unset)."""

    job: int  # JobIDRaw: an array task's own id
    start: int
    end: int
    state: str
    nodes: str
    suspended: int  # seconds

    @property
    def ran(self) -> bool:
        return bool(self.start) and self.nodes not in ("", "None assigned")


def records(cluster: Cluster, job: int) -> dict[int, list[Record]]:
    """slurmdbd's records of the job, by its own id (each task of an array has one), in
    order."""
    out = cluster.run("env", "SLURM_TIME_FORMAT=%s", "sacct", "-X", "-n", "-P", "--duplicates",
                      "-j", str(job), "-o", "JobIDRaw,Start,End,State,NodeList,Suspended")
    by_id: dict[int, list[Record]] = {}
    for line in out.splitlines():
        raw, start, end, state, nodes, suspended = line.split("|")
        by_id.setdefault(int(raw), []).append(Record(
            int(raw), int(start) if start.isdigit() else 0, int(end) if end.isdigit() else 0,
            state.split()[0], nodes, slurm_duration(suspended)))
    return {raw: sorted(recs, key=lambda r: (r.start or r.end, r.end))
            for raw, recs in sorted(by_id.items())}


def runs(recs: list[Record]) -> list[list[Record]]:
    """The job's runs, as cc-backend should hold them: a RESIZING record and the record of the
    resize are one run (issue 46); every other record that ran is a run of its own."""
    out: list[list[Record]] = []
    group: list[Record] = []
    for rec in recs:
        if not rec.ran:
            continue
        group.append(rec)
        if rec.state != "RESIZING":
            out.append(group)
            group = []
    if group:
        out.append(group)
    return out


def squeue(cluster: Cluster, job: int, fields: str = "%T") -> str:
    return cluster.run("squeue", "-h", "-j", str(job), "-o", fields, check=False).strip()


def running(cluster: Cluster, job: int) -> None:
    try:
        wait_for(lambda: squeue(cluster, job) == "RUNNING", 90, f"job {job} runs")
    except TimeoutError:
        queue = cluster.run("squeue", "-h", "-o", "%i %j %P %T %r %N", check=False)
        raise TimeoutError(f"{cluster.name}: job {job} does not run:\n{queue}") from None


def submit(cluster: Cluster, name: str, *args: str) -> int:
    return int(cluster.run("sbatch", "--parsable", "-J", name, "-o", "/dev/null", "-D", "/tmp",
                           *args).strip().split(";")[0])


Jobs = dict[str, int]  # row name (or a helper job's) -> job id


@dataclass(frozen=True)
class Row:
    name: str
    args: tuple[str, ...]
    act: Callable[[Cluster, Jobs, int], None]  # what the test does to the job, once submitted
    # the runs slurmdbd records of each of the job's own ids (an array's tasks: each its own),
    # in id order: 0 it never ran, 2 a later run (which cc-backend refuses: one start, no stop)
    runs: tuple[int, ...] = (1,)
    check: Callable[[dict, list[Record]], None] | None = None  # more of what cc-backend holds
    # sbatch arguments that name the cluster's nodes or another row's job
    extra: Callable[[Cluster, Jobs], tuple[str, ...]] | None = None


def act_resize(cluster: Cluster, jobs: Jobs, job: int) -> None:
    running(cluster, job)
    time.sleep(4)  # both daemons hold its start
    cluster.run("scontrol", "update", f"JobId={job}", "NumNodes=1")


def act_suspend(cluster: Cluster, jobs: Jobs, job: int) -> None:
    running(cluster, job)
    time.sleep(3)
    cluster.run("scontrol", "suspend", str(job))
    time.sleep(5)
    cluster.run("scontrol", "resume", str(job))


def act_release(cluster: Cluster, jobs: Jobs, job: int) -> None:
    time.sleep(3)
    cluster.run("scontrol", "release", str(job))


def act_timelimit(cluster: Cluster, jobs: Jobs, job: int) -> None:
    running(cluster, job)
    cluster.run("scontrol", "update", f"JobId={job}", "TimeLimit=20")


def act_kill(cluster: Cluster, jobs: Jobs, job: int) -> None:
    running(cluster, job)
    time.sleep(3)
    cluster.run("scancel", "--signal=KILL", "--full", str(job))


def act_never(cluster: Cluster, jobs: Jobs, job: int) -> None:
    time.sleep(8)  # its dependency failed meanwhile: it waits for ever
    assert squeue(cluster, job) == "PENDING"
    cluster.run("scancel", str(job))


def act_partition(cluster: Cluster, jobs: Jobs, job: int) -> None:
    time.sleep(2)
    cluster.run("scontrol", "update", f"JobId={job}", "Partition=gpu")
    cluster.run("scontrol", "release", str(job))


def act_deadline(cluster: Cluster, jobs: Jobs, job: int) -> None:
    """It waits for both GPUs of the gpu node, which "lc-gpus" holds, until slurmctld removes
    it: its deadline leaves no room for its time limit (``--deadline``: "start > (deadline -
    time[-min])")."""
    wait_for(lambda: squeue(cluster, job) == "", 120, f"job {job} removed at its deadline")


def act_array(cluster: Cluster, jobs: Jobs, job: int) -> None:
    """Tasks 0 and 1 run (the throttle lets two run), 1 is cancelled while it runs, 2 and 3
    while they wait."""
    wait_for(lambda: {"0 RUNNING", "1 RUNNING"} <= set(squeue(cluster, job, "%K %T").splitlines()),
             90, f"array {job}: tasks 0 and 1 run")
    time.sleep(3)
    # the waiting tasks first: task 1's end frees the throttle's slot, which one of them would
    # take in the moment before its own cancel reached slurmctld (seen on 24.05)
    cluster.run("scancel", f"{job}_[2-3]")
    cluster.run("scancel", f"{job}_1")


def act_preempted(cluster: Cluster, jobs: Jobs, job: int) -> None:
    running(cluster, job)  # "urgent" preempts it, once the three preemptable jobs run


def act_preempted_requeue(cluster: Cluster, jobs: Jobs, job: int) -> None:
    running(cluster, job)
    wait_for(lambda: squeue(cluster, job) == "PENDING", 90, f"job {job} preempted")
    # Slurm holds a requeued job back two minutes (BeginTime); an administrator may not wait
    cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")


def act_urgent(cluster: Cluster, jobs: Jobs, job: int) -> None:
    """Released once the three preemptable jobs run on node 4 and the daemons hold them: it
    asks for all of node 4's cores."""
    for low in ("preempt-requeue", "preempt-cancel", "preempt-suspend"):
        running(cluster, jobs[low])
    time.sleep(4)
    cluster.run("scontrol", "release", str(job))


def act_node_fail(cluster: Cluster, jobs: Jobs, job: int) -> None:
    """Its node (node 3, which no other row uses) set DOWN under it: slurmctld ends the run
    NODE_FAIL and requeues it; the node back, the job restarted at once."""
    running(cluster, job)
    time.sleep(4)
    node = cluster.smt_nodes[0]
    cluster.run("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=lc-node-fail")
    wait_for(lambda: squeue(cluster, job) == "PENDING", 60, f"job {job} requeued")
    # ReturnToService=2 returns it as soon as its slurmd answers: RESUME may find it idle
    cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
    cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")


def act_requeue_hold(cluster: Cluster, jobs: Jobs, job: int) -> None:
    """Requeued held while it runs (``scontrol requeuehold``), released 2 s after."""
    running(cluster, job)
    time.sleep(4)
    cluster.run("scontrol", "requeuehold", str(job))
    wait_for(lambda: squeue(cluster, job) == "PENDING", 60, f"job {job} requeued held")
    time.sleep(2)
    cluster.run("scontrol", "release", str(job))
    cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")


def restarts(cluster: Cluster, job: int) -> int:
    """slurmctld's Restarts= of the job, read as the fast path reads it."""
    out = cluster.run("scontrol", "show", "job", str(job), check=False)
    held, _ = parse_scontrol_jobs(out, ParseContext(cluster.version, "scontrol show job"))
    return held[job].restarts if job in held else 0


def act_prolog_fails(cluster: Cluster, jobs: Jobs, job: int) -> None:
    """Its first PrologSlurmctld fails (the site's check after ccadapter's hook, see
    ``failing_prolog``): slurmctld requeues it (``job_requeue``, not held) before its script
    ran; restarted at once."""
    wait_for(lambda: restarts(cluster, job) == 1 and squeue(cluster, job) == "PENDING", 90,
             f"job {job} requeued by its failed prolog")
    time.sleep(2)  # the next run's start is not the requeue's second (see TESTING.md)
    cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")


def resized_on_two(held: dict, recs: list[Record]) -> None:
    assert recs[0].state == "RESIZING" and len(recs) == 2, recs
    assert held["numNodes"] == 2  # the allocation it started with (README)


def suspended_in_wall_time(held: dict, recs: list[Record]) -> None:
    (rec,) = recs
    assert rec.suspended >= 3, recs  # Slurm's Elapsed leaves it out; cc-backend's duration not
    assert held["duration"] == rec.end - rec.start


def in_gpu_partition(held: dict, recs: list[Record]) -> None:
    assert held["partition"] == "gpu", held["partition"]


ROWS = (
    Row("resize", ("-N2", "-t", "5", "--wrap", "sleep 20"), act_resize, check=resized_on_two),
    Row("suspend", ("-t", "5", "--wrap", "sleep 15"), act_suspend,
        check=suspended_in_wall_time),
    Row("hold", ("--hold", "-t", "5", "--wrap", "sleep 4"), act_release),
    Row("timelimit", ("-t", "5", "--wrap", "sleep 8"), act_timelimit),
    Row("kill", ("-t", "5", "--wrap", "sleep 60"), act_kill),
    Row("never", ("-t", "5", "--wrap", "sleep 1"), act_never, runs=(0,),
        extra=lambda cluster, jobs: (f"--dependency=afterok:{jobs['lc-fails']}",)),
    Row("partition", ("--hold", "-t", "5", "--wrap", "sleep 4"), act_partition,
        check=in_gpu_partition),
    Row("deadline", ("-p", "gpu", "--gres=gpu:tesla:2", "-t", "1", "--deadline=now+80",
                     "--wrap", "sleep 1"), act_deadline, runs=(0,)),
    Row("array", ("--array=0-3%2", "-t", "5", "--wrap", "sleep 10"), act_array,
        runs=(0, 1, 1)),
    Row("preempt-requeue", ("-p", "lowrequeue", "-t", "5", "--wrap", "sleep 30"),
        act_preempted_requeue, runs=(2,)),
    Row("preempt-cancel", ("-p", "lowcancel", "-t", "5", "--wrap", "sleep 60"), act_preempted),
    Row("preempt-suspend", ("-p", "lowsuspend", "-t", "5", "--wrap", "sleep 20"),
        act_preempted, check=suspended_in_wall_time),
    Row("urgent", ("-p", "urgent", "-c", "16", "--hold", "-t", "5", "--wrap", "sleep 6"),
        act_urgent),
    Row("node-fail", ("-p", "topo", "--requeue", "-t", "5", "--wrap", "sleep 20"),
        act_node_fail, runs=(2,), extra=lambda cluster, jobs: ("-w", cluster.smt_nodes[0])),
    Row("prolog-fails", ("-t", "5", "--wrap", "sleep 5"), act_prolog_fails, runs=(2,)),
    Row("requeue-hold", ("-t", "5", "--wrap", "sleep 15"), act_requeue_hold, runs=(2,)),
)

FAILING_PROLOG = """#!/bin/sh
# the test bed's hook wrapper runs this after ccadapter's hook; its exit status is the prolog's:
# a job named lc-prolog-fails fails its first PrologSlurmctld
[ "$SLURM_SCRIPT_CONTEXT" = prolog_slurmctld ] && [ "$SLURM_JOB_NAME" = lc-prolog-fails ] \\
    || exit 0
mark="/tmp/${0##*/}.$SLURM_JOB_ID"  # this cluster's check: a mark per cluster
[ -e "$mark" ] && exit 0
: >"$mark"
exit 1
"""


def failing_prolog(cluster: Cluster) -> Path:
    """Installs the site check that fails "prolog-fails"'s first prolog; returns its path."""
    check = Path(cluster.hook_also).with_suffix(".check")
    tmp = check.with_suffix(".new")
    tmp.write_text(FAILING_PROLOG)
    tmp.chmod(0o755)
    tmp.replace(check)
    return check


def unlike(cc: CcBackend, cluster: Cluster, expected: dict[int, str]) -> dict[int, list]:
    """The jobs cc-backend does not hold once in the state expected: job -> its states there."""
    held = cc.jobs(cluster.name)
    got = {job: [j["jobState"] for j in held if j["jobId"] == job] for job in expected}
    return {job: states for job, states in got.items() if states != [expected[job]]}


def record_rows(cluster: Cluster, jobs: Jobs, to: Path) -> None:
    """Each row's job as slurmdbd and slurmctld tell it once it ended, into ``to``
    (tests/testbed/record_lifecycle.py): ``<row>.json`` (``sacct --json -X --allusers
    --duplicates -j ID``) and ``<row>-scontrol.txt`` (``scontrol -d show job ID``)."""
    to.mkdir(parents=True, exist_ok=True)
    for row in ROWS:
        job = str(jobs[row.name])
        for name, argv in ((f"{row.name}.json", ("sacct", "--json", "-X", "--allusers",
                                                 "--duplicates", "-j", job)),
                           (f"{row.name}-scontrol.txt", ("scontrol", "-d", "show", "job", job))):
            text = cluster.run(*argv)
            (to / name).write_text(text if text.endswith("\n") else text + "\n")


def lifecycle_run(cluster: Cluster, tmp: Path, record_to: Path | None = None) -> dict:
    with CcBackend(tmp / "cc-hook", [cluster]) as hook_cc, \
            CcBackend(tmp / "cc-poll", [cluster]) as poll_cc:
        (tmp / "hook").mkdir()
        (tmp / "poll").mkdir()
        daemons = {"hook": start_daemon(cluster, hook_cc, tmp / "hook", poll=600)}
        cfg = write_config(cluster, poll_cc, tmp / "poll", slurmPollInterval=5,
                           ccPollInterval=3600)
        LastRun(tmp / "poll" / "lastrun").set(time.time() - 5)
        daemons["poll"] = DaemonProc(cfg, tmp / "poll" / "daemon.log")
        daemons["poll"].start()
        daemons["poll"].wait_listening()
        ccs = {"hook": hook_cc, "poll": poll_cc}
        check = failing_prolog(cluster)
        jobs: Jobs = {}
        try:
            jobs["lc-fails"] = submit(cluster, "lc-fails", "-t", "5", "--wrap", "exit 1")
            jobs["lc-gpus"] = submit(cluster, "lc-gpus", "-p", "gpu", "--gres=gpu:tesla:2", "-t",
                                     "5", "--wrap", "sleep 50")
            running(cluster, jobs["lc-gpus"])  # before "deadline" asks for its GPUs
            for row in ROWS:
                extra = row.extra(cluster, jobs) if row.extra else ()
                jobs[row.name] = submit(cluster, f"lc-{row.name}", *extra, *row.args)
            with ThreadPoolExecutor(len(ROWS)) as pool:  # each row's acts at once
                for done in [pool.submit(row.act, cluster, jobs, jobs[row.name])
                             for row in ROWS]:
                    done.result()
            wait_for(lambda: all(squeue(cluster, j) == "" for j in jobs.values()), 240,
                     "every row's job ended")
            wait_for(lambda: all(r.end for j in jobs.values()
                                 for recs in records(cluster, j).values() for r in recs), 60,
                     "slurmdbd holds every row's end")
            truth = {row.name: records(cluster, jobs[row.name]) for row in ROWS}
            if record_to is not None:
                record_rows(cluster, jobs, record_to)
            expected = {job: CC_STATE[ran[0][-1].state] for tasks in truth.values()
                        for job, recs in tasks.items() if (ran := runs(recs))}
            until = time.time() + 90  # then each row's test says what is wrong
            while time.time() < until and any(unlike(cc, cluster, expected)
                                              for cc in ccs.values()):
                time.sleep(0.5)
            time.sleep(12)  # two more poll cycles: nothing else is sent
            out: dict = {"jobs": jobs, "truth": truth}
            for path, cc in ccs.items():
                held = cc.jobs(cluster.name)
                out[path] = {job: {
                    "held": [j for j in held if j["jobId"] == job],
                    "starts": [r.status for r in cc.requests(START)
                               if r.body and r.body.get("jobId") == job],
                    "stops": [r.status for r in cc.requests(STOP)
                              if r.body and r.body.get("jobId") == job]}
                    for tasks in truth.values() for job in tasks}
                out[path]["log"] = daemons[path].log.read_text()
        finally:
            check.unlink(missing_ok=True)
            for daemon in daemons.values():
                daemon.terminate()
            cluster.run("scancel", *map(str, jobs.values()), check=False)
    return out


@pytest.fixture(scope="module")
def lifecycles(testbed, tmp_path_factory) -> dict:
    clusters = {v: testbed[v] for v in VERSIONS}
    return each_at_once(lifecycle_run, clusters, tmp_path_factory, "lifecycle")


def cases():
    for version in VERSIONS:
        for row in ROWS:
            for path in PATHS:
                yield pytest.param(version, row.name, path, id=f"{version}-{row.name}-{path}")


@pytest.mark.parametrize(("version", "row", "path"), list(cases()))
def test_each_lifecycle_is_held_as_slurm_ran_it(lifecycles, version, row, path):
    run = lifecycles[version]
    if isinstance(run, Exception):
        raise run
    spec = next(r for r in ROWS if r.name == row)
    truth = run["truth"][row]
    assert "Traceback" not in run[path]["log"]
    assert tuple(len(runs(recs)) for recs in truth.values()) == spec.runs, truth
    for job, recs in truth.items():
        got = run[path][job]
        ran = runs(recs)
        if not ran:  # never ran: nothing held, nothing sent
            assert got == {"held": [], "starts": [], "stops": []}, (job, got)
            continue
        first = ran[0]  # what cc-backend holds; a later run is refused by its 24 h rule
        (held,) = got["held"]
        assert held["jobState"] == CC_STATE[first[-1].state], (held["jobState"], recs)
        assert held["startTime"] == first[0].start, (held["startTime"], recs)
        assert held["duration"] == first[-1].end - first[0].start, (held["duration"], recs)
        assert got["starts"] == [201] + [422] * (len(ran) - 1), (job, got)
        assert got["stops"] == [200], (job, got)
        if spec.check:
            spec.check(held, recs)
        print(f"\n{version} {row} {path}: job {job} records "
              f"{[(r.state, r.start, r.end, r.nodes) for r in recs]}: held {held['jobState']} "
              f"from {held['startTime']} for {held['duration']} s on {held['numNodes']} "
              f"node(s), partition {held['partition']}; starts {got['starts']} stops "
              f"{got['stops']}")
