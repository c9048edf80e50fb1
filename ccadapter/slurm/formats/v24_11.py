"""Slurm 24.11 (``data_parser/v0.0.42``): read as 23.11 (:mod:`.v23_11`).

Compared with 24.05 (``tests/fixtures/24.11/`` against ``tests/fixtures/24.05/``, checked by
``tests/unit/slurm/test_generations.py``): every field we read is laid out alike. Records add
``qosreq``, ``restart_cnt``, ``time.planned``, and ``stdin``/``stdout``/``stderr`` with their
``_expanded`` forms (not used).
"""

from __future__ import annotations

from ccadapter.slurm.formats import v23_11

SACCT_HAS_SCRIPTS = v23_11.SACCT_HAS_SCRIPTS
CLUSTER_LIST_ARGS = v23_11.CLUSTER_LIST_ARGS
parse_sacct_job = v23_11.parse_sacct_job
parse_cluster_list = v23_11.parse_cluster_list
