"""Slurm 23.11 (``data_parser/v0.0.40``), and the layout 24.05 to 25.11 keep.

Differences from 23.02 and how they are handled (``tests/fixtures/23.11/`` against
``tests/fixtures/23.02/``):
- ``meta.slurm.version`` (lower case) with strings for its numbers (handled in
  ``.text.version_from_meta``), ``meta.plugin.data_parser`` names the parser;
- ``state.current`` became a list of strings (base state first, then flags). A run that ended
  by a requeue is ``["PENDING", "REQUEUED"]`` (22.05 and 23.02 wrote ``REQUEUED``): read as
  ``REQUEUED``, as sacct's text prints it, so the run is stopped, not taken for one that
  never ran (``tests/fixtures/*/sacct-requeued.json``); a record closed by a resize,
  ``["PENDING", "RESIZING"]``, is read as ``RESIZING`` alike;
- ``exit_code.return_code`` became a ``{"set", "infinite", "number"}`` object,
  ``exit_code.status`` a list; ``signal`` was added (not used);
- everything else we read is laid out as on 23.02: number objects for ``time.limit``,
  ``array.task_id`` and ``het.job_offset``; ``time.start`` of a job cancelled while pending
  the unset sentinel 4294967294 or its end time (never started either way: it has no
  nodes); ``tres`` entries with ``name: ""`` and
  the job's ``energy`` entry ``count: -2`` while unset (NO_VAL64 dumped as int64); ``script``
  filled by ``-B -j IDS`` with ``AccountingStoreFlags=job_script``: one call gets the
  scripts of many jobs, even after slurmctld forgot them;
- a het job's components: ``het.job_id`` is the leader's id and ``het.job_offset`` a number
  object; a job that is no component has ``het.job_id`` 0 and an unset offset. slurmdbd
  learns of a het job only when it starts: until then its components read like jobs of
  their own (``het.job_id`` 0, JobID ``12`` in the listing instead of 22.05's ``11+1``), so a
  pending het job is listed per component by ``ccadapter jobs``; it is never sent before it
  starts, when it becomes one job;
- sacctmgr speaks JSON, as from 23.02 on: ``sacctmgr list clusters --json``, one object per
  cluster in ``clusters`` with its ``name`` (as cc-slurm-adapter reads it).

A record with 26.05's ``exclusive`` is refused: its sharing would be lost (:mod:`.v26_05`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ccadapter.model import Shared
from ccadapter.slurm.formats.records import ParseContext, SacctRecord
from ccadapter.slurm.formats.values import (
    build_sacct_record,
    cluster_names,
    field,
    job_id_of,
    number,
    text,
)

# The flag a run that ended by a requeue carries after its base state (PENDING): its state.
REQUEUED = "REQUEUED"
# ... and the record a resize closed (``["PENDING", "RESIZING"]``; 22.05 and 23.02 write
# ``RESIZING``), as sacct's text prints it: :mod:`ccadapter.slurm.resize` joins it with the
# record that follows (``tests/fixtures/*/sacct-resized.json``).
RESIZING = "RESIZING"
# sacct --json -B -j IDS fills "script" (with AccountingStoreFlags=job_script).
SACCT_HAS_SCRIPTS = True
# sacctmgr's arguments for the cluster list that parse_cluster_list reads.
CLUSTER_LIST_ARGS: tuple[str, ...] = ("list", "clusters", "--json")


def parse_sacct_job(record: Mapping[str, Any], ctx: ParseContext) -> SacctRecord:
    ctx = ctx.for_job(job_id_of(record, ctx))
    if "exclusive" in record:
        raise ctx.error(f"field 'exclusive' is 26.05's: not a {ctx.version} sacct record as "
                        "23.11 to 25.11 write it")
    return parse_record(record, ctx, None)


def parse_record(record: Mapping[str, Any], ctx: ParseContext,
                 shared: Shared | None) -> SacctRecord:
    """A record laid out as 23.11 to 26.05 write it (26.05's sharing read by v26_05)."""
    state = field(record, "state.current", ctx)
    if not isinstance(state, list) or not state or not all(isinstance(s, str) for s in state):
        raise ctx.error(f"state.current: expected a list of strings, got {state!r}")
    exit_code = record.get("exit_code") or {}
    if not isinstance(exit_code, Mapping):
        raise ctx.error(f"exit_code: expected an object, got {exit_code!r}")
    return build_sacct_record(
        record,
        ctx,
        state=next((flag for flag in (REQUEUED, RESIZING) if flag in state[1:]), state[0]),
        array_task_id=number(field(record, "array.task_id", ctx), "array.task_id", ctx),
        exit_code=number(exit_code.get("return_code"), "exit_code.return_code", ctx),
        shared=shared,
        script=text(record.get("script"), "script", ctx),
    )


def parse_cluster_list(out: str, ctx: ParseContext) -> tuple[list[str], list[str]]:
    """``sacctmgr list clusters --json``: the ``name`` of each entry of ``clusters``."""
    try:
        doc = json.loads(out)
    except (ValueError, RecursionError):
        raise ctx.error(f"output is not JSON: {out[:80]!r}") from None
    clusters = doc.get("clusters") if isinstance(doc, Mapping) else None
    if not isinstance(clusters, list):
        raise ctx.error("output has no 'clusters' list")
    return cluster_names([c.get("name") if isinstance(c, Mapping) else None
                          for c in clusters], ctx)
