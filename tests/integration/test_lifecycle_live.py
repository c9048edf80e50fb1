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
  wall time from start to end, suspension included (Slurm's Elapsed is the same; README).
- ``hold``: submitted held (``--hold``), released 3 s later: one run, from its release on.
- ``timelimit``: its time limit raised while it runs (``scontrol update TimeLimit=``).
- ``kill``: ``scancel --signal=KILL --full`` while it runs, the batch shell too (it ends as
  Slurm says: cancelled or failed).
- ``never``: a dependency that can never be met (``afterok`` on a job that failed), then
  ``scancel``: it never ran, so cc-backend holds nothing of it and was sent nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import START, STOP, CcBackend
from tests.conftest import HEAVY_VERSIONS
from tests.integration.conftest import each_at_once
from tests.integration.sync_scenario import DaemonProc, wait_for, write_config
from tests.integration.test_hook_live import start_daemon
from tests.integration.workload import Cluster

pytestmark = pytest.mark.integration

PATHS = ("hook", "poll")
CC_STATE = {"COMPLETED": "completed", "FAILED": "failed", "CANCELLED": "cancelled",
            "TIMEOUT": "timeout"}


def records(cluster: Cluster, job: int) -> list[tuple[int, int, str, str]]:
    """(start, end, state, nodes) of each of slurmdbd's records of the job, epoch times (0:
    unset), in order."""
    out = cluster.run("env", "SLURM_TIME_FORMAT=%s", "sacct", "-X", "-n", "-P", "--duplicates",
                      "-j", str(job), "-o", "Start,End,State,NodeList")
    rows = []
    for line in out.splitlines():
        start, end, state, nodes = line.split("|")
        rows.append((int(start) if start.isdigit() else 0, int(end) if end.isdigit() else 0,
                     state.split()[0], nodes))
    return sorted(rows)


def squeue_state(cluster: Cluster, job: int) -> str:
    return cluster.run("squeue", "-h", "-j", str(job), "-o", "%T", check=False).strip()


def running(cluster: Cluster, job: int) -> None:
    try:
        wait_for(lambda: squeue_state(cluster, job) == "RUNNING", 90, f"job {job} runs")
    except TimeoutError:
        queue = cluster.run("squeue", "-h", "-o", "%i %j %T %r %N", check=False)
        raise TimeoutError(f"{cluster.name}: job {job} does not run:\n{queue}") from None


def submit(cluster: Cluster, name: str, *args: str) -> int:
    return int(cluster.run("sbatch", "--parsable", "-J", name, "-o", "/dev/null", "-D", "/tmp",
                           *args).strip().split(";")[0])


@dataclass(frozen=True)
class Row:
    name: str
    args: tuple[str, ...]
    act: Callable[[Cluster, int], None]  # what the test does to the job, once submitted
    started: bool = True  # whether the job ever runs


def act_resize(cluster: Cluster, job: int) -> None:
    running(cluster, job)
    time.sleep(4)  # both daemons hold its start
    cluster.run("scontrol", "update", f"JobId={job}", "NumNodes=1")


def act_suspend(cluster: Cluster, job: int) -> None:
    running(cluster, job)
    time.sleep(3)
    cluster.run("scontrol", "suspend", str(job))
    time.sleep(5)
    cluster.run("scontrol", "resume", str(job))


def act_hold(cluster: Cluster, job: int) -> None:
    time.sleep(3)
    cluster.run("scontrol", "release", str(job))


def act_timelimit(cluster: Cluster, job: int) -> None:
    running(cluster, job)
    cluster.run("scontrol", "update", f"JobId={job}", "TimeLimit=20")


def act_kill(cluster: Cluster, job: int) -> None:
    running(cluster, job)
    time.sleep(3)
    cluster.run("scancel", "--signal=KILL", "--full", str(job))


def act_never(cluster: Cluster, job: int) -> None:
    time.sleep(8)  # its dependency failed meanwhile: it waits for ever
    assert squeue_state(cluster, job) == "PENDING"
    cluster.run("scancel", str(job))


ROWS = (
    Row("resize", ("-N2", "-t", "5", "--wrap", "sleep 20"), act_resize),
    Row("suspend", ("-t", "5", "--wrap", "sleep 15"), act_suspend),
    Row("hold", ("--hold", "-t", "5", "--wrap", "sleep 4"), act_hold),
    Row("timelimit", ("-t", "5", "--wrap", "sleep 8"), act_timelimit),
    Row("kill", ("-t", "5", "--wrap", "sleep 60"), act_kill),
    Row("never", ("-t", "5", "--wrap", "sleep 1"), act_never, started=False),
)


def lifecycle_run(cluster: Cluster, tmp: Path) -> dict:
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
        try:
            failed = submit(cluster, "lc-fails", "-t", "5", "--wrap", "exit 1")
            jobs = {}
            for row in ROWS:
                extra = (f"--dependency=afterok:{failed}",) if row.name == "never" else ()
                jobs[row.name] = submit(cluster, f"lc-{row.name}", *extra, *row.args)
            with ThreadPoolExecutor(len(ROWS)) as pool:  # each row's acts at once
                for done in [pool.submit(row.act, cluster, jobs[row.name]) for row in ROWS]:
                    done.result()
            ids = [*jobs.values(), failed]
            wait_for(lambda: all(squeue_state(cluster, j) == "" for j in ids), 180,
                     "every row's job ended")
            wait_for(lambda: all(r[1] for j in ids for r in records(cluster, j)), 60,
                     "slurmdbd holds every row's end")
            truth = {name: records(cluster, job) for name, job in jobs.items()}
            ran = {name: job for name, job in jobs.items()
                   if next(r for r in ROWS if r.name == name).started}
            for path, cc in ccs.items():
                wait_for(lambda cc=cc: all(
                    [j["jobState"] for j in cc.jobs(cluster.name) if j["jobId"] == job]
                    == [CC_STATE[truth[name][-1][2]]] for name, job in ran.items()), 90,
                    f"{path}: cc-backend holds every row's job ended")
            time.sleep(12)  # two more poll cycles: nothing else is sent
            out: dict = {"jobs": jobs, "truth": truth}
            for path, cc in ccs.items():
                held = cc.jobs(cluster.name)
                out[path] = {name: {
                    "held": [j for j in held if j["jobId"] == job],
                    "starts": [r.status for r in cc.requests(START)
                               if r.body and r.body.get("jobId") == job],
                    "stops": [r.status for r in cc.requests(STOP)
                              if r.body and r.body.get("jobId") == job]}
                    for name, job in jobs.items()}
                out[path]["log"] = daemons[path].log.read_text()
        finally:
            for daemon in daemons.values():
                daemon.terminate()
    return out


@pytest.fixture(scope="module")
def lifecycles(testbed, tmp_path_factory) -> dict:
    clusters = {v: testbed[v] for v in HEAVY_VERSIONS}
    return each_at_once(lifecycle_run, clusters, tmp_path_factory, "lifecycle")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("row", [r.name for r in ROWS])
@pytest.mark.parametrize("version", HEAVY_VERSIONS)
def test_each_lifecycle_is_held_as_slurm_ran_it(lifecycles, version, row, path):
    run = lifecycles[version]
    if isinstance(run, Exception):
        raise run
    spec = next(r for r in ROWS if r.name == row)
    truth, got = run["truth"][row], run[path][row]
    assert "Traceback" not in run[path]["log"]
    if not spec.started:
        assert all(r[0] == 0 or not r[3] or r[3] == "None assigned" for r in truth), truth
        assert got == {"held": [], "starts": [], "stops": []}, got
        return
    first, last = truth[0], truth[-1]
    (held,) = got["held"]
    assert held["jobState"] == CC_STATE[last[2]], (held["jobState"], truth)
    assert held["startTime"] == first[0], (held["startTime"], truth)
    assert held["duration"] == last[1] - first[0], (held["duration"], truth)
    assert got["starts"] == [201] and got["stops"] == [200], got
    if row == "resize":
        assert first[2] == "RESIZING" and len(truth) == 2, truth
        assert held["numNodes"] == 2  # the allocation it started with (README)
    print(f"\n{version} {row} {path}: job {run['jobs'][row]} records {truth}: held "
          f"{held['jobState']} from {held['startTime']} for {held['duration']} s on "
          f"{held['numNodes']} node(s); starts {got['starts']} stops {got['stops']}")
