"""Slurm 22.05 (sacct ``openapi/dbv0.0.38``).

The baseline generation:
- integers are plain JSON numbers; ``time.start`` is ``null`` for a job that never started;
- ``state.current`` is a string;
- ``array.task_id`` is a number or ``null``;
- ``exit_code.return_code`` is a plain number;
- sacct has no ``script``, ``exclusive`` or ``oversubscribe``: scripts come from slurmctld
  (``scontrol write batch_script``) and sharing from ``scontrol show job`` only
  (``sacct -B`` prints scripts in text form only, one header per job; not used);
- ``gres/gpu`` appears in ``tres.allocated`` only with ``AccountingStorageTRES=gres/gpu``;
- a heterogeneous job's component carries ``het: {"job_id": LEADER, "job_offset": N}``
  (plain numbers) from submission on, and ``sacct -j LEADER`` answers with every component;
  any other job has ``{"job_id": 0, "job_offset": null}``. The listing's JobID reads
  ``LEADER+N`` from submission on too (``.listing``);
- sacctmgr has no ``--json``: the cluster list is read as parsable text, one name a line
  (``sacctmgr -n -P list clusters format=Cluster``);
- consumed energy is the ``energy`` entry of the job record's ``tres.allocated`` (the job's
  ``tres_alloc_str``, ``parse_job`` in src/plugins/openapi/dbv0.0.38/parse.c),
  ``{"type": "energy", "name": null, "id": 3, "count": JOULES}``; ``count`` is ``null``
  while unset (``_dump_to_int64`` writes NO_VAL64 as null). Read by ``values.consumed_energy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccadapter.slurm.formats.records import ParseContext, SacctRecord
from ccadapter.slurm.formats.values import (
    build_sacct_record,
    cluster_names,
    field,
    job_id_of,
    mapping,
    number,
    text,
)

# sacct --json -B -j IDS does not fill "script" on this generation.
SACCT_HAS_SCRIPTS = False
# sacctmgr's arguments for the cluster list that parse_cluster_list reads.
CLUSTER_LIST_ARGS: tuple[str, ...] = ("-n", "-P", "list", "clusters", "format=Cluster")


def parse_sacct_job(record: Mapping[str, Any], ctx: ParseContext) -> SacctRecord:
    return plain_state_record(record, ctx, release="22.05", has_script=False)


def plain_state_record(record: Mapping[str, Any], ctx: ParseContext, *, release: str,
                       has_script: bool) -> SacctRecord:
    """A record whose ``state.current`` is a string and ``exit_code.return_code`` a plain
    number: 22.05's, and 23.02's, which adds the batch script (``has_script``)."""
    ctx = ctx.for_job(job_id_of(record, ctx))
    state = field(record, "state.current", ctx)
    if not isinstance(state, str):
        raise ctx.error(f"state.current: expected a string on {release}, got {state!r:.80}")
    exit_code = mapping(record.get("exit_code"), "exit_code", ctx)
    return build_sacct_record(
        record,
        ctx,
        state=state,
        array_task_id=number(field(record, "array.task_id", ctx), "array.task_id", ctx),
        exit_code=number(exit_code.get("return_code"), "exit_code.return_code", ctx),
        shared=None,
        script=text(record.get("script"), "script", ctx) if has_script else None,
    )


def parse_cluster_list(out: str, ctx: ParseContext) -> tuple[list[str], list[str]]:
    """``sacctmgr -n -P list clusters format=Cluster``: one name a line, no header."""
    if out.lstrip().startswith("{"):
        raise ctx.error("JSON output: 22.05's sacctmgr writes the cluster list as text")
    return cluster_names([line.strip() for line in out.splitlines() if line.strip()], ctx)
