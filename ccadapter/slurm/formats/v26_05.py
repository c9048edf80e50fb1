"""Slurm 26.05 (``data_parser/v0.0.45``).

Differences from 24.11 and how they are handled:
- sacct records add ``exclusive`` (``NO``/``NODE``/``USER``/``MCS``/``TOPO``) and
  ``oversubscribe``: sharing is known from slurmdbd alone, even after slurmctld forgot
  the job;
- records add ``sluid``/``original_sluid`` and ``segment_size`` (not used);
- ``scontrol show job`` text prints ``Exclusive=`` beside ``OverSubscribe=`` and a
  ``SLUID=`` line (handled in ``.scontrol``);
- ``sacctmgr list clusters --json`` drops ``select_plugin`` from each cluster (not used):
  the list is read as in 24.11.
Everything else is read as in 24.11: heterogeneous jobs (``het`` as in 24.11; each
component has a SLUID of its own) and consumed energy (the job's ``tres.allocated``
``energy`` entry, ``count: -2`` while unset: data_parser/v0.0.45 parsers.c:9287-9295,
:2933-2941, :9062).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccadapter.slurm.formats import v24_11
from ccadapter.slurm.formats.records import ParseContext, SacctRecord
from ccadapter.slurm.formats.values import job_id_of, shared_from_flags, text

SACCT_HAS_SCRIPTS = v24_11.SACCT_HAS_SCRIPTS
CLUSTER_LIST_ARGS = v24_11.CLUSTER_LIST_ARGS
parse_cluster_list = v24_11.parse_cluster_list


def parse_sacct_job(record: Mapping[str, Any], ctx: ParseContext) -> SacctRecord:
    ctx = ctx.for_job(job_id_of(record, ctx))
    if "exclusive" not in record:
        raise ctx.error("missing field 'exclusive' (present in every 26.05 sacct record)")
    exclusive = text(record.get("exclusive"), "exclusive", ctx)
    oversubscribe = text(record.get("oversubscribe"), "oversubscribe", ctx)
    return v24_11.parse_record(record, ctx, shared_from_flags(oversubscribe, exclusive))
