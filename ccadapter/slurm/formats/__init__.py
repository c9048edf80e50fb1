"""Parsers per Slurm generation, and the choice among them.

A new Slurm release = one new module here plus one folder of recorded outputs under
``tests/fixtures/``. A generation we have not verified is refused with an error naming the
version and the command, never parsed on hope.
"""

from __future__ import annotations

from types import ModuleType

from ccadapter.errors import UnsupportedSlurmVersion
from ccadapter.slurm.formats import v22_05, v24_11, v26_05
from ccadapter.slurm.formats._common import SlurmVersion

_BY_GENERATION: dict[tuple[int, int], ModuleType] = {
    (22, 5): v22_05,
    (24, 11): v24_11,
    (26, 5): v26_05,
}

SUPPORTED = tuple(f"{major}.{minor:02d}" for major, minor in _BY_GENERATION)


def format_for(version: SlurmVersion, command: str) -> ModuleType:
    """The parser module for ``version``; raises for generations we do not know."""
    try:
        return _BY_GENERATION[version.generation]
    except KeyError:
        raise UnsupportedSlurmVersion(
            str(version), command,
            f"unsupported Slurm generation (supported: {', '.join(SUPPORTED)})",
        ) from None
