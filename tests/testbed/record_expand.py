"""Record a job grown by another (``--dependency=expand:``) as each release says it, into
tests/fixtures/<version>/: ``sacct-expanded.json`` (``sacct --json -X --allusers --duplicates
-j BASE,EXPANDER`` once both ended), ``sacct-expanded.txt`` (the listing's lines, epoch
times, as :mod:`ccadapter.slurm.formats.listing` asks them) and ``scontrol-expanded.txt``
(``scontrol -d show job EXPANDER`` right after the merge, as the fast path reads it at its
EpilogSlurmctld).

Run as root with the test bed up:  .venv/bin/python -m tests.testbed.record_expand
[--versions 22.05,...]

How: the base job runs on one debug node; an allocation (``salloc --no-shell``: a batch
script's step forbids the merge) asks for the other with ``--dependency=expand:BASE``; 4 s
after it runs, ``scontrol update JobId=EXPANDER NumNodes=0`` hands its node to the base job.
Expansion is off unless ``SchedulerParameters=permit_job_expansion``, and Slurm does not
support it beside gang scheduling, which the test bed's preemption rows use: slurmctld 22.05,
23.02, 23.11, 24.05 and 25.05 died (SIGSEGV in ``gs_job_start`` / ``add_job_to_cores``) at the
next job start after a merge. So this script turns it on for the recording alone (slurm.conf
and ``scontrol reconfigure``) and then restarts the cluster with its own slurm.conf again
(``scontrol shutdown``, then ``tests/testbed/slurm up``): it is not part of the test bed's
runs.

What they show: each job's record is closed RESIZING at the merge. The base job's next record
holds both nodes and ends as it ends (24.11 writes no RESIZING record for it: one record, both
nodes). The expander's next record holds no node and never ends: COMPLETED, End Unknown, for
good; slurmctld shows it COMPLETED with no node, a ResizeTime, and the EndTime its time
limit's. 25.11.7's slurmctld dies of the merge (SIGSEGV in ``_valid_license_job_expansion``, a
job without licenses): nothing is recorded there.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ccadapter.slurm.formats.listing import FIELDS
from tests.integration.workload import Cluster, record_on_each
from tests.testbed.record_resize import wait_state

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CRASHES = {"25.11": "slurmctld 25.11.7 crashes on NumNodes=0 of an expanding job without "
                    "licenses (_valid_license_job_expansion, job_mgr.c:12581)"}


TESTBED = Path(__file__).resolve().parent / "slurm"
HOOK = Path(__file__).resolve().parents[2] / "ccadapter" / "prep" / "hook.py"
EXPANSION = "SchedulerParameters=permit_job_expansion\n"


@contextmanager
def expansion_on(cluster: Cluster) -> Iterator[None]:
    """``permit_job_expansion`` on the cluster while the block runs; then its own slurm.conf
    again and the cluster stopped, gang scheduling's tables with it (``restart_testbed``
    starts it again)."""
    conf = Path(cluster.slurm_conf)
    text = conf.read_text()
    conf.write_text(text + EXPANSION)
    try:
        cluster.run("scontrol", "reconfigure")
        time.sleep(5)  # 24.05 on: slurmctld starts anew
        yield
    finally:
        conf.write_text(text)
        # stopped by slurmctld itself: 24.11 on, reconfigure started its daemons anew under
        # other pids than the test bed's pid files name
        cluster.run("scontrol", "shutdown", check=False)


def restart_testbed() -> None:
    """The clusters ``expansion_on`` stopped, started again, as tests/run brings them up."""
    time.sleep(5)  # the daemons are gone
    subprocess.run([str(TESTBED), "up"], check=True,
                   env={**os.environ, "CCADAPTER_HOOK_PY": str(HOOK)})


def record(cluster: Cluster) -> list[Path] | str:
    if cluster.short in CRASHES:
        return f"{cluster.short}: not recorded: {CRASHES[cluster.short]}"
    with expansion_on(cluster):
        return recorded(cluster)


def recorded(cluster: Cluster, timeout: float = 180) -> list[Path]:
    base = cluster.run("sbatch", "--parsable", "-J", "expand-base", "-N1", "-o", "/dev/null",
                       "-D", "/tmp", "--wrap", "sleep 20").strip().split(";")[0]
    wait_state(cluster, base, "RUNNING", 60)
    node = cluster.run("squeue", "-h", "-j", base, "-o", "%N").strip()
    cluster.run("salloc", "--no-shell", "-J", "expand", "-N1", "-x", node,
                f"--dependency=expand:{base}")
    expander = cluster.run("squeue", "-h", "-n", "expand", "-o", "%i").split()[0]
    time.sleep(4)
    cluster.run("scontrol", "update", f"JobId={expander}", "NumNodes=0")
    shown = cluster.run("scontrol", "-d", "show", "job", expander)
    wait_state(cluster, base, "", timeout)
    jobs = f"{base},{expander}"
    until = time.monotonic() + 60
    while True:  # slurmdbd has the base job's end
        listing = cluster.run("env", "SLURM_TIME_FORMAT=%s", "TZ=UTC0", "sacct", "-X", "-n",
                              "-P", "--allusers", "--duplicates", "-j", jobs, "-o", FIELDS)
        ended = [line for line in listing.splitlines() if line.startswith(f"{base}|")
                 and "|COMPLETED|" in line]
        if ended or time.monotonic() > until:
            break
        time.sleep(1)
    doc = cluster.run("sacct", "--json", "-X", "--allusers", "--duplicates", "-j", jobs)
    out = FIXTURES / cluster.short
    paths = [out / "sacct-expanded.json", out / "sacct-expanded.txt",
             out / "scontrol-expanded.txt"]
    for path, text in zip(paths, (doc, listing, shown), strict=True):
        path.write_text(text if text.endswith("\n") else text + "\n")
    return paths


def main() -> None:
    try:
        record_on_each(__doc__.split("\n\n")[0], record)
    finally:
        restart_testbed()


if __name__ == "__main__":
    main()
