"""Parsers per Slurm generation, and the choice among them.

A new Slurm release = one new module here plus one folder of recorded outputs under
``tests/fixtures/``. A generation we have not verified is refused with an error naming the
version and the command, never parsed on hope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from ccadapter.errors import UnsupportedSlurmVersion
from ccadapter.slurm.formats import v22_05, v24_11, v26_05
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
    (24, 11): v24_11,
    (26, 5): v26_05,
}

SUPPORTED = tuple(f"{major}.{minor:02d}" for major, minor in _BY_GENERATION)


def format_for(version: SlurmVersion, command: str) -> SlurmFormat:
    """The parser module for ``version``; raises for generations we do not know."""
    try:
        return _BY_GENERATION[version.generation]
    except KeyError:
        raise UnsupportedSlurmVersion(
            str(version), command,
            f"unsupported Slurm generation (supported: {', '.join(SUPPORTED)})",
        ) from None
