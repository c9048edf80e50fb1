"""A job shrunk while it runs (``scontrol update JobId=.. NumNodes=1``), on real Slurm into the
real cc-backend, by the hook alone and by the poll alone (issue 46, the resize row).

Seen on 24.11 and 26.05 (main at c5b4cfc): slurmdbd closes the job's record at the resize as
RESIZING and opens a second one dated from the resize; ccadapter took the second for another
run (its start refused with 422 by cc-backend's one-run-a-day rule, its stop answered 404) and
never stopped the first, left running in cc-backend for ever. 22.05 dates the second record
from the job's start, and was right.

Now (:mod:`ccadapter.slurm.resize`): one cc-backend job from the first start to the last end,
in Slurm's end state, with the allocation it started with; one start and one stop sent, none
refused. The two daemons watch the same job, each into its own cc-backend: one listens for the
cluster's hook and polls every 10 minutes (what it gets came through the hook), the other polls
every 5 s and hears no hook.
"""

from __future__ import annotations

import time
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


def records(cluster: Cluster, job: int) -> list[tuple[int, int, str, str]]:
    """(start, end, state, nodes) of each of slurmdbd's records of the job, epoch times."""
    out = cluster.run("env", "SLURM_TIME_FORMAT=%s", "sacct", "-X", "-n", "-P", "--duplicates",
                      "-j", str(job), "-o", "Start,End,State,NodeList")
    rows = []
    for line in out.splitlines():
        start, end, state, nodes = line.split("|")
        rows.append((int(start), int(end) if end.isdigit() else 0, state, nodes))
    return sorted(rows)


def squeue_state(cluster: Cluster, job: int) -> str:
    return cluster.run("squeue", "-h", "-j", str(job), "-o", "%T", check=False).strip()


def resize_run(cluster: Cluster, tmp: Path) -> dict:
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
            job = int(cluster.run("sbatch", "--parsable", "-J", "resized", "-N2", "-o",
                                  "/dev/null", "-D", "/tmp", "--wrap", "sleep 20")
                      .strip().split(";")[0])
            wait_for(lambda: squeue_state(cluster, job) == "RUNNING", 60, "the job runs")
            time.sleep(4)  # both daemons hold its start
            cluster.run("scontrol", "update", f"JobId={job}", "NumNodes=1")
            wait_for(lambda: squeue_state(cluster, job) == "", 120, "the job ended")
            wait_for(lambda: [r[2] for r in records(cluster, job)][-1:] == ["COMPLETED"], 60,
                     "slurmdbd holds the job's end")
            for path, cc in ccs.items():
                wait_for(lambda cc=cc: [j["jobState"] for j in cc.jobs(cluster.name)
                                        if j["jobId"] == job] == ["completed"], 60,
                         f"{path}: cc-backend holds the job completed")
            time.sleep(12)  # two more poll cycles: nothing else is sent
            out = {"job": job, "records": records(cluster, job)}
            for path, cc in ccs.items():
                out[path] = {
                    "held": [j for j in cc.jobs(cluster.name) if j["jobId"] == job],
                    "starts": [r.status for r in cc.requests(START)
                               if r.body and r.body.get("jobId") == job],
                    "stops": [r.status for r in cc.requests(STOP)
                              if r.body and r.body.get("jobId") == job],
                    "log": daemons[path].log.read_text()}
        finally:
            for daemon in daemons.values():
                daemon.terminate()
    return out


@pytest.fixture(scope="module")
def resized(testbed, tmp_path_factory) -> dict:
    clusters = {v: testbed[v] for v in HEAVY_VERSIONS}
    return each_at_once(resize_run, clusters, tmp_path_factory, "resize")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("version", HEAVY_VERSIONS)
def test_a_resized_job_is_one_job_in_cc_backend_from_its_start_to_its_end(resized, version,
                                                                          path):
    run = resized[version]
    if isinstance(run, Exception):
        raise run
    first, last = run["records"][0], run["records"][-1]
    assert first[2] == "RESIZING" and len(run["records"]) == 2, run["records"]
    got = run[path]
    (held,) = got["held"]
    assert held["jobState"] == "completed"
    assert held["startTime"] == first[0]
    assert held["duration"] == last[1] - first[0], (held["duration"], run["records"])
    assert held["numNodes"] == 2  # the allocation it started with (README)
    assert got["starts"] == [201] and got["stops"] == [200], got
    assert "Traceback" not in got["log"]
    print(f"\n{version} {path}: job {run['job']} records {run['records']}: held "
          f"{held['jobState']} from {held['startTime']} for {held['duration']} s on "
          f"{held['numNodes']} nodes; starts {got['starts']} stops {got['stops']}")
