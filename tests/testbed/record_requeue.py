"""Record a requeued job's runs as ``sacct --json`` prints them, into
tests/fixtures/<version>/sacct-requeued.json, and slurmctld's record of it just after the
requeue, into tests/fixtures/<version>/scontrol-requeued.txt.

Run as root with the test bed up:  .venv/bin/python -m tests.testbed.record_requeue
[--versions 22.05,...]

Each cluster runs ``sleep 20``, requeues it (``scontrol requeue``) while it runs, waits for its
second run to end (Slurm holds a requeued job back a couple of minutes: BeginTime), then
records ``sacct --json -X --allusers --duplicates -j ID``: the first run ended as requeued
(22.05 and 23.02 write the state ``REQUEUED``; 23.11 on ``["PENDING", "REQUEUED"]``, the base
state first), the second completed. slurmctld's record, read right after the requeue, is
already the next run's: pending (COMPLETING while the epilog runs), ``Restarts=1``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.integration.workload import Cluster, record_on_each

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def record(cluster: Cluster, timeout: float = 420) -> Path:
    out = cluster.run("sbatch", "--parsable", "-J", "requeued", "-o", "/dev/null",
                      "--wrap", "sleep 20")
    job = out.strip().split(";")[0]
    time.sleep(6)
    cluster.run("scontrol", "requeue", job)
    held = cluster.run("scontrol", "show", "job", "-d", job)
    until = time.monotonic() + timeout
    while True:
        states = cluster.run("sacct", "-X", "-n", "-P", "--duplicates", "-j", job, "-o",
                             "State").split()
        if len(states) >= 2 and states[-1] == "COMPLETED":
            break
        if time.monotonic() > until:
            raise TimeoutError(f"{cluster.name}: job {job}: {states}")
        time.sleep(5)
    doc = json.loads(cluster.run("sacct", "--json", "-X", "--allusers", "--duplicates",
                                 "-j", job))
    path = FIXTURES / cluster.short / "sacct-requeued.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    (FIXTURES / cluster.short / "scontrol-requeued.txt").write_text(held)
    return path


def main() -> None:
    record_on_each(__doc__.split("\n\n")[0], record)


if __name__ == "__main__":
    main()
