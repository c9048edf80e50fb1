"""Record a job shrunk while it runs (``scontrol update JobId=.. NumNodes=1``) as each release
says it, into tests/fixtures/<version>/: ``sacct-resized.json`` (``sacct --json -X --allusers
--duplicates -j ID`` once it ended), ``sacct-resized.txt`` (the listing's lines, epoch times,
as :mod:`ccadapter.slurm.formats.listing` asks them) and ``scontrol-resized.txt``
(``scontrol -d show job ID`` after the resize, while it runs).

Run as root with the test bed up:  .venv/bin/python -m tests.testbed.record_resize
[--versions 22.05,...]

What they show: slurmdbd closes the job's record at the resize with the state RESIZING (23.11
on: ``["PENDING", "RESIZING"]``, the base state first) and opens a second one, which ends as
the job ends. 22.05 dates the second record's start at the job's start; 24.11 and 26.05 at
the resize, so that it reads as another run of the job id. slurmctld keeps the job's
StartTime and adds ResizeTime.
"""

from __future__ import annotations

import time
from pathlib import Path

from ccadapter.slurm.formats.listing import FIELDS
from tests.integration.workload import Cluster, record_on_each

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def wait_state(cluster: Cluster, job: str, wanted: str, timeout: float) -> None:
    until = time.monotonic() + timeout
    while True:
        state = cluster.run("squeue", "-h", "-j", job, "-o", "%T", check=False).strip()
        if state == wanted or (wanted == "" and state in ("", "COMPLETING")):
            return
        if time.monotonic() > until:
            raise TimeoutError(f"{cluster.name}: job {job} is {state!r}, not {wanted!r}")
        time.sleep(0.5)


def record(cluster: Cluster, timeout: float = 180) -> list[Path]:
    job = cluster.run("sbatch", "--parsable", "-J", "resized", "-N2", "-o", "/dev/null",
                      "-D", "/tmp", "--wrap", "sleep 20").strip().split(";")[0]
    wait_state(cluster, job, "RUNNING", 60)
    time.sleep(3)
    cluster.run("scontrol", "update", f"JobId={job}", "NumNodes=1")
    time.sleep(1)
    shown = cluster.run("scontrol", "-d", "show", "job", job)
    wait_state(cluster, job, "", timeout)
    until = time.monotonic() + 60
    while True:  # slurmdbd has the job's end
        listing = cluster.run("env", "SLURM_TIME_FORMAT=%s", "TZ=UTC0", "sacct", "-X", "-n",
                              "-P", "--allusers", "--duplicates", "-j", job, "-o", FIELDS)
        if "COMPLETED" in listing or time.monotonic() > until:
            break
        time.sleep(1)
    doc = cluster.run("sacct", "--json", "-X", "--allusers", "--duplicates", "-j", job)
    out = FIXTURES / cluster.short
    paths = [out / "sacct-resized.json", out / "sacct-resized.txt", out / "scontrol-resized.txt"]
    for path, text in zip(paths, (doc, listing, shown), strict=True):
        path.write_text(text if text.endswith("\n") else text + "\n")
    return paths


def main() -> None:
    record_on_each(__doc__.split("\n\n")[0], record)


if __name__ == "__main__":
    main()
