"""Slurm 23.02 (``data_parser/v0.0.39``).

Differences from 22.05 and how they are handled (``tests/fixtures/23.02/`` against
``tests/fixtures/22.05/``):
- ``meta`` names the data parser (``meta.plugins.data_parser``) and keeps ``meta.Slurm``
  with plain integers (read by ``.text.version_from_meta``);
- many integers became ``{"set", "infinite", "number"}`` objects, as 24.11 writes them later
  (``time.limit``, ``array.task_id``, ``het.job_offset``, ``required.memory_per_cpu``); unset
  or infinite reads as None/0;
- ``time.start`` of a job cancelled while pending is its end time (as on 22.05) or the unset
  sentinel 4294967294, by the moment of the scancel; either reads as never started, the
  record having no nodes (``values.build_sacct_record``);
- ``state.current`` is still a plain string and ``exit_code.return_code`` a plain number, as
  on 22.05 (a list and a number object from 23.11 on, :mod:`.v23_11`);
- sacct carries ``script``, filled with ``-B -j IDS`` when ``AccountingStoreFlags=job_script``
  is set (seen on the test bed), so scripts come from slurmdbd in the same call;
- the job's ``energy`` TRES reads ``count: -2`` while unset (NO_VAL64 dumped as int64), as on
  24.11; a set count is the consumed energy in joules;
- a job that is no het job's component has ``het.job_id`` 0 and an unset offset;
- sacctmgr speaks JSON: ``sacctmgr list clusters --json``, one object per cluster in
  ``clusters`` with its ``name``, as on 24.11.
``scontrol show job -d``, ``scontrol -o show node``, ``scontrol show config``, ``scontrol
ping`` and the ``sacct -P`` listing print what 22.05 prints in the parts we read (the
recordings of ``tests/fixtures/23.02/testbed/`` are parsed by the same tests as every
version's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccadapter.slurm.formats import v22_05, v23_11
from ccadapter.slurm.formats.records import ParseContext, SacctRecord

SACCT_HAS_SCRIPTS = True
CLUSTER_LIST_ARGS = v23_11.CLUSTER_LIST_ARGS
parse_cluster_list = v23_11.parse_cluster_list


def parse_sacct_job(record: Mapping[str, Any], ctx: ParseContext) -> SacctRecord:
    return v22_05.plain_state_record(record, ctx, release="23.02", has_script=True)
