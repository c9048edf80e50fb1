"""``sacct --json -j IDS``: the records of named jobs, read batch by batch, a record that
breaks its batch costing its own job only.

One corrupt slurmdbd row can make ``sacct --json`` fail for every batch that names its job:
sacct exits non-zero, runs into its timeout, or prints JSON cut short. Read as the failure of
the batch, it would hold the whole window (and every later one) for as long as the row stays
(until ``slurmQueryMaxSpan``, a week). So a batch that fails is split in halves, and each half
that fails again, until the job at fault stands alone: its id is handed back as unreadable
(asked again later, :mod:`ccadapter.outbox.unparsed`), the others are read. One bad record
among 190 ids costs about 16 more calls, once.

What fails whatever is asked is not a record: when both halves of a batch fail as slurmdbd
being away fails (its transient errors, timeouts included), or both halves and all four
quarters fail (sacct broken, not a row), the batch's failure is raised as it came, for the
window to wait at the outage's start; a release no parser reads is raised at once. The
parts are asked without the runner's retries: a blip during the search at worst hands back
a good id as unreadable, which reads at its next turn.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ccadapter.errors import (
    SlurmCommandError,
    SlurmParseError,
    TransientSlurmError,
    UnsupportedSlurmVersion,
)
from ccadapter.slurm.formats import SlurmFormat, format_for
from ccadapter.slurm.formats.records import ParseContext, SacctRecord, SlurmVersion
from ccadapter.slurm.formats.text import version_from_meta
from ccadapter.slurm.runner import CommandRunner

COMMAND = "sacct --json"


@dataclass
class Records:
    """What a batch of ids read as: its records, and the ids whose record could not be read
    (each with its error)."""

    records: list[SacctRecord] = field(default_factory=list)
    version: SlurmVersion | None = None
    unparsed: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, other: Records) -> Records:
        self.records += other.records
        self.version = self.version or other.version
        self.unparsed += other.unparsed
        self.errors += other.errors
        return self


class DetailReader:
    """Reads the records of named jobs through ``runner``; ``version_text()`` names the
    release in errors, ``seen(version)`` hears of each release an answer names."""

    def __init__(self, runner: CommandRunner, version_text: Callable[[], str],
                 seen: Callable[[SlurmVersion], None]) -> None:
        self.runner = runner
        self.version_text = version_text
        self.seen = seen

    def read(self, ids: list[int], scripts: bool, clusters: list[str]) -> Records:
        """The records of ``ids`` (``scripts``: with the batch scripts slurmdbd stored,
        ``-B``; ``clusters``: the ``--clusters`` arguments)."""
        try:
            return self._read(ids, scripts, clusters, retry=True)
        except UnsupportedSlurmVersion:
            raise
        except (SlurmCommandError, SlurmParseError) as exc:
            if len(ids) == 1:
                return self._unreadable(ids[0], exc)
            tried: dict[tuple[int, ...], Records | Exception] = {}
            return self._isolate(ids, exc, lambda part: self._attempt(
                part, scripts, clusters, tried))

    def _isolate(self, ids: list[int], failure: Exception,
                 attempt: Callable[[list[int]], Records | Exception]) -> Records:
        """``ids`` failed with ``failure``: its halves are read, and each that fails is
        split again. Where both halves fail, the quarters are asked: where all of them fail
        too, sacct fails whatever part of the batch it is asked, and no record is at fault:
        ``failure`` is raised (as at once when both halves fail as an outage does)."""
        parts = _halves(ids)
        outcomes = [attempt(part) for part in parts]
        if all(isinstance(o, Exception) for o in outcomes):
            if all(isinstance(o, TransientSlurmError) for o in outcomes):
                raise failure  # slurmdbd is away
            parts = [quarter for part in parts for quarter in _halves(part)]
            outcomes = [attempt(part) for part in parts]
            if all(isinstance(o, Exception) for o in outcomes):
                raise failure
        out = Records()
        for part, outcome in zip(parts, outcomes, strict=True):
            if not isinstance(outcome, Exception):
                out.add(outcome)
            elif len(part) == 1:
                out.add(self._unreadable(part[0], outcome))
            else:
                out.add(self._isolate(part, outcome, attempt))
        return out

    def _attempt(self, ids: list[int], scripts: bool, clusters: list[str],
                 tried: dict[tuple[int, ...], Records | Exception]) -> Records | Exception:
        """One part asked once, without the runner's retries; its failure is returned."""
        key = tuple(ids)
        if key not in tried:
            try:
                tried[key] = self._read(ids, scripts, clusters, retry=False)
            except UnsupportedSlurmVersion:
                raise
            except (SlurmCommandError, SlurmParseError) as exc:
                tried[key] = exc
        return tried[key]

    def _unreadable(self, job_id: int, exc: Exception) -> Records:
        detail = str(exc.detail if isinstance(exc, SlurmParseError) else exc)
        error = SlurmParseError(self.version_text(), COMMAND, f"job {job_id}: its record "
                                f"breaks every answer that holds it: {detail[:300]}", job_id)
        return Records(unparsed=[job_id], errors=[str(error)])

    def _read(self, ids: list[int], scripts: bool, clusters: list[str], *,
              retry: bool) -> Records:
        argv = ["sacct", "--json", "-X", "--allusers", "--duplicates",
                *(["-B"] if scripts else []), "--jobs", ",".join(map(str, ids)), *clusters]
        with gc_paused():
            doc = self._json(argv, retry)
            version = version_from_meta(doc, COMMAND)
            self.seen(version)
            parser = format_for(version, COMMAND)
            records, unparsed, errors = parse_records(
                doc, parser, ParseContext(str(version), COMMAND), set(ids))
            del doc
        return Records(records, version, unparsed, errors)

    def _json(self, argv: list[str], retry: bool) -> dict[str, Any]:
        out = self.runner.run(argv, retry=retry)
        try:
            doc = json.loads(out)
        except (ValueError, RecursionError) as exc:
            # Besides JSONDecodeError: ValueError for an integer past Python's 4,300-digit
            # limit, RecursionError for nesting past the decoder's depth.
            raise SlurmParseError(self.version_text(), COMMAND,
                                  f"output is not JSON ({exc}): {out[:120]!r}") from None
        if not isinstance(doc, dict):
            raise SlurmParseError(self.version_text(), COMMAND, "output is not a JSON object")
        return doc


def _halves(ids: list[int]) -> list[list[int]]:
    """``ids`` in two (a single id stays whole)."""
    if len(ids) < 2:
        return [ids]
    half = len(ids) // 2
    return [ids[:half], ids[half:]]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Decoding a large sacct answer creates many acyclic objects; the cyclic garbage
    collector would scan them again and again (it doubles the decode time of a large answer).
    Nothing created here forms cycles, so collection waits until the end."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def parse_records(doc: dict, parser: SlurmFormat, ctx: ParseContext, wanted: set[int] | None
                  ) -> tuple[list[SacctRecord], list[int], list[str]]:
    """The records read, the job ids of those that could not be read, and the errors."""
    raw = doc.get("jobs")
    if not isinstance(raw, list):
        raise ctx.error("output has no 'jobs' list")
    records: list[SacctRecord] = []
    unparsed: list[int] = []
    errors: list[str] = []
    for item in raw:
        try:
            rec = parser.parse_sacct_job(item, ctx)
        except SlurmParseError as exc:
            errors.append(str(exc))
            if exc.job_id is not None:
                unparsed.append(exc.job_id)
            continue
        if wanted is None or rec.job_id in wanted or rec.het_job_id in wanted:
            records.append(rec)  # `sacct -j LEADER` lists every component
    return records, unparsed, errors
