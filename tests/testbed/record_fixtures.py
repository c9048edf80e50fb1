"""Record real Slurm outputs of the workload mix from the test bed into tests/fixtures/.

Run as root with the test bed up:  .venv/bin/python -m tests.testbed.record_fixtures
Writes tests/fixtures/<version>/testbed/:
  workload.json        name -> raw job ids, and the window start
  squeue-busy.json     squeue --json while most of the workload runs
  scontrol-d-busy.txt  scontrol show job -d (all jobs) at the same moment
  sacct-window.json    sacct --json --allusers --duplicates over the window, after all ended
  scontrol-d-final.txt scontrol show job -d (all jobs) after all ended (no GPU indices left)
  sacct-scripts.json   sacct --json -B -j IDS (24.11 and later only)
  sinfo.json           sinfo --json
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.integration.workload import Cluster, Submitted, drive, submit, testbed_clusters

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def record(cluster: Cluster) -> Path:
    out = FIXTURES / cluster.short / "testbed"
    out.mkdir(parents=True, exist_ok=True)

    def snapshot(sub: Submitted) -> None:
        (out / "squeue-busy.json").write_text(cluster.run("squeue", "--json"))
        (out / "scontrol-d-busy.txt").write_text(cluster.run("scontrol", "show", "job", "-d"))

    sub = submit(cluster)
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(sub.submitted_at - 5))
    drive(sub, while_busy=snapshot)
    time.sleep(2)
    (out / "sacct-window.json").write_text(cluster.run(
        "sacct", "--json", "--allusers", "--duplicates", "--starttime", start, "--endtime", "now"))
    if cluster.short != "22.05":
        ids = ",".join(map(str, sub.all_ids()))
        (out / "sacct-scripts.json").write_text(cluster.run(
            "sacct", "--json", "--allusers", "--duplicates", "-B", "--jobs", ids))
    (out / "scontrol-d-final.txt").write_text(cluster.run("scontrol", "show", "job", "-d"))
    (out / "sinfo.json").write_text(cluster.run("sinfo", "--json"))
    (out / "workload.json").write_text(json.dumps(
        {"cluster": cluster.name, "version": cluster.version, "since": sub.submitted_at - 5,
         "ids": sub.ids}, indent=1) + "\n")
    return out


def main() -> None:
    clusters = testbed_clusters()
    if not clusters:
        raise SystemExit("no test-bed cluster is up: run tests/testbed/slurm up")
    with ThreadPoolExecutor(len(clusters)) as pool:
        for path in pool.map(record, clusters):
            print(f"recorded {path}")


if __name__ == "__main__":
    main()
