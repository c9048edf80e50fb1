"""Parsers per Slurm generation, and the choice among them.

A new Slurm release = one new module here plus one folder of recorded outputs under
``tests/fixtures/``. Eight generations are verified on real clusters, 22.05 to 26.05.

A release newer than the newest verified (26.11 and on) is read with the newest parser: its
outputs are checked as strictly as any (every field read is type-checked, and a record that
does not fit is reported with the version and the command, counted, and asked again at the
next cycles until it fits; nothing it lacks is guessed). So a Slurm upgrade does not stop a
site's accounting while ccadapter catches up, and a changed layout of the fields read shows
up as errors naming the field; a field whose meaning changes under the same layout is what
verifying that release (its recorded folder and the tests over it) is for. A generation
older than the oldest verified, or
one between two verified ones that SchedMD never released, is refused with an error naming
the version and the command, never parsed on hope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from ccadapter.errors import UnsupportedSlurmVersion
from ccadapter.slurm.formats import (
    v22_05,
    v23_02,
    v23_11,
    v24_05,
    v24_11,
    v25_05,
    v25_11,
    v26_05,
)
from ccadapter.slurm.formats.records import ParseContext, SacctRecord, SlurmVersion


@runtime_checkable
class SlurmFormat(Protocol):
    """What a generation's module (``vXX_YY``) provides: what differs between generations,
    and nothing else (text that every generation prints alike is :mod:`.text`'s)."""

    # whether ``sacct --json -B -j IDS`` fills the batch scripts
    SACCT_HAS_SCRIPTS: bool
    # sacctmgr's arguments for the cluster list that parse_cluster_list reads
    CLUSTER_LIST_ARGS: tuple[str, ...]

    def parse_sacct_job(self, record: Mapping[str, Any], ctx: ParseContext) -> SacctRecord:
        """One job record of ``sacct --json``; rejects a record of another generation."""
        ...

    def parse_cluster_list(self, out: str, ctx: ParseContext
                           ) -> tuple[list[str], list[str]]:
        """``sacctmgr`` with CLUSTER_LIST_ARGS: (names, errors)."""
        ...


_BY_GENERATION: dict[tuple[int, int], SlurmFormat] = {
    (22, 5): v22_05,
    (23, 2): v23_02,
    (23, 11): v23_11,
    (24, 5): v24_05,
    (24, 11): v24_11,
    (25, 5): v25_05,
    (25, 11): v25_11,
    (26, 5): v26_05,
}

SUPPORTED = tuple(f"{major}.{minor:02d}" for major, minor in _BY_GENERATION)
NEWEST = max(_BY_GENERATION)  # the newest generation verified


def format_for(version: SlurmVersion, command: str) -> SlurmFormat:
    """The parser module for ``version``: its own, or the newest for a newer release
    (:func:`newer_than_verified`); raises for the generations we do not read."""
    parser = _BY_GENERATION.get(version.generation)
    if parser is not None:
        return parser
    if newer_than_verified(version):
        return _BY_GENERATION[NEWEST]
    raise UnsupportedSlurmVersion(
        str(version), command,
        f"unsupported Slurm generation (supported: {', '.join(SUPPORTED)}, and later "
        f"releases read as {SUPPORTED[-1]})",
    )


def newer_than_verified(version: SlurmVersion) -> bool:
    """A release after the newest verified generation: read with its parser."""
    return version.generation > NEWEST
