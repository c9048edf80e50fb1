"""Slurm 25.11 (``data_parser/v0.0.44``): read as 23.11 (:mod:`.v23_11`).

Compared with 25.05 (``tests/fixtures/25.11/`` against ``tests/fixtures/25.05/``, checked by
``tests/unit/slurm/test_generations.py``): every field we read is laid out alike, and the
records carry the same fields as 25.05's. ``scontrol show job`` adds a ``SLUID=`` line (not
used); ``scontrol show config`` has no ``PowerAction`` yet (26.05's,
:func:`.text.parse_node_boot`), so the config still tells whether slurmctld may boot a job's
nodes.
"""

from __future__ import annotations

from ccadapter.slurm.formats import v23_11

SACCT_HAS_SCRIPTS = v23_11.SACCT_HAS_SCRIPTS
CLUSTER_LIST_ARGS = v23_11.CLUSTER_LIST_ARGS
parse_sacct_job = v23_11.parse_sacct_job
parse_cluster_list = v23_11.parse_cluster_list
