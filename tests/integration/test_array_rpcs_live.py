"""What an array job's starts cost slurmctld through the hook (issue 47): its tasks run one
batch script, which the fast path asks for once (ccadapter/prep/arrays.py), not once per task.
Read by slurmctld's own count (``sdiag``: REQUEST_BATCH_SCRIPT, REQUEST_JOB_INFO_SINGLE)
around a 30-task array that only the hook announces (the daemon's next poll is 10 minutes
away), on every release at once, every task held in the real cc-backend with the script in
its metaData. Before the change a 60-task array cost 60 batch scripts on 22.05. Where slurmdbd
already holds the script (23.02 on, AccountingStoreFlags=job_script) when the fast path asks,
the array costs slurmctld no batch script at all (24.11 to 26.05 here); on 23.02 to 24.05
slurmdbd had not stored it yet when the first task started (it has it seconds later), so
slurmctld was asked once. The bound is one per array, whichever route a release takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ccbackend import CcBackend
from tests.conftest import VERSIONS
from tests.integration.conftest import each_at_once, hook_configured
from tests.integration.sync_scenario import exactly_once, wait_for
from tests.integration.test_hook_flood_live import sdiag_rpcs
from tests.integration.test_hook_live import start_daemon
from tests.integration.workload import Cluster

pytestmark = pytest.mark.integration

TASKS = 30
RPCS = ("REQUEST_BATCH_SCRIPT", "REQUEST_JOB_INFO_SINGLE")


def tasks(cc: CcBackend, array: int) -> set[int]:
    """The ids of the array's tasks cc-backend holds (a stop's body names no array)."""
    return {b["jobId"] for b in cc.started() if b.get("arrayJobId") == array}


def ended(cluster: Cluster, array: int) -> int:
    out = cluster.run("sacct", "-X", "-n", "-P", "-j", str(array), "-o", "State", check=False)
    return sum(1 for line in out.splitlines() if line.strip() == "COMPLETED")


def array_run(cluster: Cluster, tmp: Path) -> dict:
    with CcBackend(tmp / "cc-backend", [cluster]) as cc:
        daemon = start_daemon(cluster, cc, tmp, poll=600)
        try:
            before = {rpc: sdiag_rpcs(cluster, rpc) for rpc in RPCS}
            out = cluster.run("sbatch", "--parsable", "-J", "rpc-array", "-o", "/dev/null",
                              "-D", "/tmp", f"--array=0-{TASKS - 1}", "-t", "2",
                              "--wrap", "sleep 2")
            array = int(out.strip().split(";")[0])
            wait_for(lambda: len(tasks(cc, array) & {b["jobId"] for b in cc.stopped()}) >= TASKS,
                     240, f"{cluster.name}: the {TASKS} tasks of array {array} stopped")
            cost = {rpc: sdiag_rpcs(cluster, rpc) - n for rpc, n in before.items()}
            wait_for(lambda: ended(cluster, array) >= TASKS, 90,  # what the checks compare with
                     f"{cluster.name}: slurmdbd holds the {TASKS} tasks' ends")
        finally:
            assert daemon.terminate() == 0
        held = [b for b in cc.started() if b.get("arrayJobId") == array]
        return {"cost": cost, "held": held,
                "problems": exactly_once(cc, cluster, sorted(b["jobId"] for b in held))}


@pytest.fixture(scope="module")
def arrays(testbed, tmp_path_factory) -> dict:
    clusters = {v: testbed[v] for v in VERSIONS}
    for cluster in clusters.values():
        assert hook_configured(cluster), f"{cluster.name}: slurm.conf has no hook"
    return each_at_once(array_run, clusters, tmp_path_factory, "array")


@pytest.mark.parametrize("version", VERSIONS)
def test_an_arrays_tasks_cost_one_batch_script(arrays, version):
    run = arrays[version]
    if isinstance(run, Exception):
        raise run
    cost, held = run["cost"], run["held"]
    print(f"\n{version}: {TASKS} tasks cost slurmctld {cost['REQUEST_BATCH_SCRIPT']} "
          f"batch script(s) and {cost['REQUEST_JOB_INFO_SINGLE']} single-job reads "
          f"({cost['REQUEST_JOB_INFO_SINGLE'] / TASKS:.2f} per task)")
    assert run["problems"] == []
    assert len(held) == TASKS
    scripts = {b["metaData"].get("jobScript") for b in held}
    assert len(scripts) == 1 and "sleep 2" in scripts.pop()  # every task's, the one asked
    assert cost["REQUEST_BATCH_SCRIPT"] <= 1  # once per array, or none: slurmdbd's copy
    assert cost["REQUEST_JOB_INFO_SINGLE"] <= TASKS * 1.5
