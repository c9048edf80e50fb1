"""Growth by ``--dependency=expand:`` through the lifecycle matrix's harness, on one cluster at
a time, expansion on for this run alone (issue 46; TESTING.md says why it is not a row of the
matrix: Slurm does not support it beside the gang scheduling the matrix's SUSPEND,GANG row
needs, and slurmctld 25.11.7 dies of the merge).

Run as root with the test bed up:
  CCADAPTER_SUITE=main .venv/bin/python -m tests.testbed.expand_live 22.05 [24.11 ...]

Two rows: "expand-base" runs on node 2; "expand", an allocation (``salloc --no-shell``: a
batch script's step forbids the merge) on node 1 with ``--dependency=expand:`` on it, gives
its node to the base job 4 s after it runs (``NumNodes=0``). Both paths (hook, poll) into the
real cc-backend, as the matrix checks them: the base job one job from its start to its end,
on the node it started with; the expander one job, completed, ended at the merge. Then the
cluster is stopped (``scontrol shutdown``) and started again with its own slurm.conf.
Exit status 1 when a check fails.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tests.integration.test_lifecycle_live as matrix
from tests.integration.sync_scenario import wait_for
from tests.integration.workload import Cluster, testbed_clusters
from tests.testbed.record_expand import CRASHES, expansion_on, restart_testbed

SBATCH = matrix.submit


def submit(cluster: Cluster, name: str, *args: str) -> int:
    """The matrix's sbatch, but the expander is an allocation, asked once its base runs
    (slurmctld refuses an expand dependency on a job that does not run)."""
    if name != "lc-expand":
        return SBATCH(cluster, name, *args)
    base = int(next(a for a in args if a.startswith("--dependency")).split(":")[1])
    matrix.running(cluster, base)
    subprocess.Popen([*cluster.prefix, "salloc", "--no-shell", "-J", name, *args],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    wait_for(lambda: cluster.run("squeue", "-h", "-n", name, "-o", "%i").strip(), 30,
             f"{cluster.name}: {name} queued")
    return int(cluster.run("squeue", "-h", "-n", name, "-o", "%i").split()[0])


def act_base(cluster: Cluster, jobs: matrix.Jobs, job: int) -> None:
    matrix.running(cluster, job)


def act_expand(cluster: Cluster, jobs: matrix.Jobs, job: int) -> None:
    matrix.running(cluster, job)
    time.sleep(4)  # both daemons hold its start
    cluster.run("scontrol", "update", f"JobId={job}", "NumNodes=0")


ROWS = (
    matrix.Row("expand-base", ("-N1", "-t", "5", "--wrap", "sleep 30"), act_base,
               extra=lambda c, j: ("-w", c.nodes[1])),
    matrix.Row("expand", ("-p", "debug", "-N1", "-t", "5"), act_expand,
               extra=lambda c, j: ("-w", c.nodes[0], f"--dependency=expand:{j['expand-base']}")),
)


def truth_waits(wait):
    """The matrix waits for every record's end; the expander's last record never ends."""
    def patient(cond, timeout, what):
        if "every row's end" not in what:
            return wait(cond, timeout, what)
        with contextlib.suppress(TimeoutError):
            wait(cond, 20, what)
    return patient


def check(cluster: Cluster, out: dict) -> list[str]:
    problems = []
    base, gave = out["jobs"]["expand-base"], out["jobs"]["expand"]
    recs = {job: matrix.records(cluster, job)[job] for job in (base, gave)}
    merge = recs[gave][0].end
    want = {base: ("completed", recs[base][0].start, recs[base][-1].end - recs[base][0].start, 1),
            gave: ("completed", recs[gave][0].start, merge - recs[gave][0].start, 1)}
    for path in matrix.PATHS:
        for job, expected in want.items():
            got = out[path][job]
            held = [(h["jobState"], h["startTime"], h["duration"], h["numNodes"])
                    for h in got["held"]]
            line = (f"{cluster.short} {path} job {job} records "
                    f"{[(r.state, r.start, r.end, r.nodes) for r in recs[job]]}: held {held} "
                    f"starts {got['starts']} stops {got['stops']}")
            print(line)
            if held != [expected] or got["starts"] != [201] or got["stops"] != [200]:
                problems.append(f"{line}; expected {expected}, [201], [200]")
    return problems


def run(cluster: Cluster) -> list[str]:
    with expansion_on(cluster):
        return check(cluster, matrix.lifecycle_run(cluster, Path(tempfile.mkdtemp())))


def main() -> int:
    wanted = sys.argv[1:] or ["22.05"]
    clusters = [c for c in testbed_clusters() if c.short in wanted and c.short not in CRASHES]
    matrix.ROWS, matrix.submit, matrix.wait_for = ROWS, submit, truth_waits(matrix.wait_for)
    matrix.CC_STATE["RESIZING"] = "completed"  # the expander's one ran record
    problems: list[str] = []
    try:
        for cluster in clusters:
            problems += run(cluster)
    finally:
        restart_testbed()
    print("\n".join(problems) or f"expand: right on {', '.join(c.short for c in clusters)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
