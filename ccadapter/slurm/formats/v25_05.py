"""Slurm 25.05 (``data_parser/v0.0.43``): read as 23.11 (:mod:`.v23_11`).

Compared with 24.11 (``tests/fixtures/25.05/`` against ``tests/fixtures/24.11/``, checked by
``tests/unit/slurm/test_generations.py``): every field we read is laid out alike. Records add
``reservation.requested`` and ``segment_size`` (not used); ``scontrol show job`` adds
``LicensesAlloc=`` (not used).
"""

from __future__ import annotations

from ccadapter.slurm.formats import v23_11

SACCT_HAS_SCRIPTS = v23_11.SACCT_HAS_SCRIPTS
CLUSTER_LIST_ARGS = v23_11.CLUSTER_LIST_ARGS
parse_sacct_job = v23_11.parse_sacct_job
parse_cluster_list = v23_11.parse_cluster_list
