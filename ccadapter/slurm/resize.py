"""A job resized while it runs is one run: slurmdbd's records of it folded into one. Pure.

When slurmctld changes a running job's allocation (``scontrol update JobId=.. NumNodes=``,
or a job expanded by another with ``--dependency=expand:``), slurmdbd closes the job's record
at that moment with the state RESIZING and opens another one, which ends as the job ends
(``tests/fixtures/*/sacct-resized.*``). 22.05 dates the new record's start at the job's start,
24.11 and 26.05 at the resize: read as they are, the second record is a second run of the job
id (which cc-backend refuses: it holds one run of a job id a day) and the first never ends
(RESIZING counts as running). slurmctld itself keeps the job's StartTime and adds ResizeTime.

So each RESIZING record is joined with the record of the same job id (and het component)
that follows it: the run keeps the first record's identity, submission, start and allocation
(the one cc-backend was sent with its start) and takes the last record's state, end, exit
code and time limit; energy is the sum of the records'. A RESIZING record whose successor
slurmdbd has not stored yet (the window between the two) is a run that has not ended. The
listing (:class:`~ccadapter.slurm.formats.listing.RunStamp`) is folded alike.

A job that gave all its nodes to the job it expands (``scontrol update JobId=.. NumNodes=0``
on a job submitted with ``--dependency=expand:``) has its record closed RESIZING alike, and
then one more that holds no node and never ends (COMPLETED, End Unknown, for good:
``tests/fixtures/*/sacct-expanded.*``). Its run ends at the resize: read as it is, it would
be a run that never ends, held running in cc-backend for ever.

A listing that holds the second record without the first (a window that begins after the
resize) cannot tell it is one: it names an unknown run, whose detailed read (``sacct -j ID
--duplicates``: every record of the job) folds it into the run the outbox holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from ccadapter.model import base_state
from ccadapter.slurm.formats.listing import RunStamp
from ccadapter.slurm.formats.records import SacctRecord

RESIZING = "RESIZING"


class _Run(Protocol):
    @property
    def job_id(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def start_time(self) -> int: ...
    @property
    def end_time(self) -> int: ...
    @property
    def nodes(self) -> str | tuple[str, ...]: ...


R = TypeVar("R", SacctRecord, RunStamp)


def resized(item: _Run) -> bool:
    return base_state(item.state) == RESIZING


def fold_resized(items: Iterable[R]) -> list[R]:
    """``items`` with each resized job's records folded into one, in the place of its first
    record; every other item unchanged and in its place."""
    items = list(items)
    if not any(resized(i) for i in items):
        return items
    groups: dict[tuple[int, int | None], list[int]] = {}
    for index, item in enumerate(items):
        groups.setdefault((item.job_id, _offset(item)), []).append(index)
    replaced: dict[int, R] = {}
    dropped: set[int] = set()
    for indices in groups.values():
        if not any(resized(items[i]) for i in indices):
            continue
        order = sorted(indices, key=lambda i: (items[i].start_time,
                                               items[i].end_time or float("inf")))
        head = order[0]
        run: list[R] = [items[head]]
        for i in order[1:]:
            if resized(run[-1]):
                run.append(items[i])
                dropped.add(i)
                continue
            replaced[head] = _joined(run)
            head, run = i, [items[i]]
        replaced[head] = _joined(run)
    return [replaced.get(i, item) for i, item in enumerate(items) if i not in dropped]


def _offset(item: SacctRecord | RunStamp) -> int | None:
    if isinstance(item, SacctRecord):
        return item.het_offset
    return item.het.offset if item.het else None


def _joined(run: Sequence[R]) -> R:
    first, last = run[0], run[-1]
    if len(run) == 1 and not resized(first):
        return first
    end = 0 if resized(last) else last.end_time  # its successor is not recorded yet
    if not end and not last.nodes and len(run) > 1:  # gave its nodes away: ended at the resize
        end = run[-2].end_time
    if isinstance(first, SacctRecord):
        assert isinstance(last, SacctRecord)
        energies = [r.energy for r in run if isinstance(r, SacctRecord) and r.energy is not None]
        return dataclasses.replace(first, state=last.state, end_time=end,
                                   exit_code=last.exit_code, time_limit=last.time_limit,
                                   energy=sum(energies) if energies else None, resized=True)
    return dataclasses.replace(first, state=last.state, end_time=end)
