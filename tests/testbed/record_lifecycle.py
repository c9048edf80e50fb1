"""Record each row of the lifecycle matrix (tests/integration/test_lifecycle_live.py) as each
release says it, into tests/fixtures/<version>/lifecycle/: ``<row>.json`` (``sacct --json -X
--allusers --duplicates -j ID`` once the row's job ended) and ``<row>-scontrol.txt``
(``scontrol -d show job ID`` then, before MinJobAge lets slurmctld forget it).

Run as root with the test bed up:
  CCADAPTER_SUITE=main .venv/bin/python -m tests.testbed.record_lifecycle [--versions 22.05,...]

The rows run as the matrix runs them, both daemons and their cc-backends included (a row's
timing is the matrix's); what each release records is read by tests/unit/slurm/
test_lifecycle_records.py without a cluster.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.integration.test_lifecycle_live import ROWS, lifecycle_run
from tests.integration.workload import Cluster, record_on_each

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def record(cluster: Cluster) -> list[Path]:
    to = FIXTURES / cluster.short / "lifecycle"
    lifecycle_run(cluster, Path(tempfile.mkdtemp(prefix=f"lifecycle-{cluster.short}-")), to)
    return [to / f"{row.name}.json" for row in ROWS]


def main() -> None:
    record_on_each(__doc__.split("\n\n")[0], record)


if __name__ == "__main__":
    main()
