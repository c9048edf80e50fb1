"""Slurm 24.05 (``data_parser/v0.0.41``): read as 23.11 (:mod:`.v23_11`).

Compared with 23.11 (``tests/fixtures/24.05/`` against ``tests/fixtures/23.11/``, checked by
``tests/unit/slurm/test_generations.py``): every field we read is laid out alike, and the
records carry the same fields as 23.11's.
"""

from __future__ import annotations

from ccadapter.slurm.formats import v23_11

SACCT_HAS_SCRIPTS = v23_11.SACCT_HAS_SCRIPTS
CLUSTER_LIST_ARGS = v23_11.CLUSTER_LIST_ARGS
parse_sacct_job = v23_11.parse_sacct_job
parse_cluster_list = v23_11.parse_cluster_list
