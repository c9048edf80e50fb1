"""Record ``sdiag`` as each Slurm version prints it, with jobs held, into tests/fixtures/<version>/.

Run as root with the test bed up:  .venv/bin/python -m tests.testbed.record_sdiag

  sdiag.txt   each standard cluster, three jobs held pending (``sbatch -H``) and one running,
              once slurmctld's job state counts (``Job states ts``) include them; the jobs
              are cancelled afterwards

The daemon reads how many jobs slurmctld holds from it
(:func:`ccadapter.slurm.formats.sdiag.parse_sdiag`) before it would dump them all.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ccadapter.slurm.formats.sdiag import parse_sdiag
from tests.integration.workload import Cluster, testbed_clusters

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def record(cluster: Cluster) -> Path:
    job = ("-t", "5", "-o", "/dev/null", "--wrap", "sleep 60")
    ids = [cluster.run("sbatch", "--parsable", "-H", *job).strip() for _ in range(3)]
    ids.append(cluster.run("sbatch", "--parsable", *job).strip())
    try:
        until = time.time() + 120
        while True:
            text = cluster.run("sdiag")
            held = parse_sdiag(text, cluster.version)
            if (held.pending, held.running) == (3, 1) or time.time() > until:
                break
            time.sleep(2)
    finally:
        cluster.run("scancel", *ids, check=False)
    path = FIXTURES / cluster.short / "sdiag.txt"
    path.write_text(text)
    return path


def main() -> None:
    with ThreadPoolExecutor(8) as pool:
        for path in pool.map(record, testbed_clusters()):
            print(path)


if __name__ == "__main__":
    main()
