"""Slurm 26.05 (``data_parser/v0.0.45``).

Differences from 25.11 and how they are handled (``tests/fixtures/26.05/`` against
``tests/fixtures/25.11/``, checked by ``tests/unit/slurm/test_generations.py``):
- sacct records add ``exclusive`` (``NO``/``NODE``/``USER``/``MCS``/``TOPO``) and
  ``oversubscribe``: sharing is known from slurmdbd alone, even after slurmctld forgot
  the job;
- records add ``sluid``/``original_sluid`` (not used; ``segment_size`` came with 25.05);
- ``scontrol show job`` text prints ``Exclusive=`` beside ``OverSubscribe=`` (handled in
  ``.scontrol``); the ``SLUID=`` line came with 25.11;
- ``scontrol show config`` does not print the new ``PowerAction`` entries, so it cannot tell
  whether slurmctld may boot a job's nodes (:func:`.text.parse_node_boot`);
- ``sacctmgr list clusters --json`` drops ``select_plugin`` from each cluster (not used):
  the list is read as before.
Everything else is read as 23.11 to 25.11 write it (:mod:`.v23_11`): heterogeneous jobs
(``het`` as before; each component has a SLUID of its own) and consumed energy (the job's
``tres.allocated`` ``energy`` entry, ``count: -2`` while unset).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccadapter.slurm.formats import v23_11
from ccadapter.slurm.formats.records import ParseContext, SacctRecord
from ccadapter.slurm.formats.values import job_id_of, shared_from_flags, text

SACCT_HAS_SCRIPTS = v23_11.SACCT_HAS_SCRIPTS
CLUSTER_LIST_ARGS = v23_11.CLUSTER_LIST_ARGS
parse_cluster_list = v23_11.parse_cluster_list


def parse_sacct_job(record: Mapping[str, Any], ctx: ParseContext) -> SacctRecord:
    ctx = ctx.for_job(job_id_of(record, ctx))
    if "exclusive" not in record:
        raise ctx.error("missing field 'exclusive' (present in every 26.05 sacct record)")
    exclusive = text(record.get("exclusive"), "exclusive", ctx)
    oversubscribe = text(record.get("oversubscribe"), "oversubscribe", ctx)
    return v23_11.parse_record(record, ctx, shared_from_flags(oversubscribe, exclusive))
