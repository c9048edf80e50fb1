"""``scontrol ping``: which slurmctld of ``SlurmctldHost`` answers, to tell which is in control.

The text is the same on 22.05, 24.11 and 26.05 (``tests/fixtures/*/scontrol-ping-*.txt``):
one line per SlurmctldHost, in slurm.conf order, ``Slurmctld(MODE) at HOST is UP|DOWN``,
MODE ``primary`` for the first, ``backup`` for the second of two, ``backupN`` for the N-th of
more; when one is DOWN and the caller is root, a three-line banner follows ("RESTORE
SLURMCTLD DAEMON TO SERVICE"). The exit status is 0 when any controller is UP, else 1.
24.05 rewrote the command around ``ping_all_controllers()`` and added ``--json`` (not on
22.05, so not used here) without changing the text.

Slurm says which controllers *answer*, not which is in control: a backup standing by
answers pings too. Control follows from how slurmctld hands it over: a backup takes control
only when no controller before it answers (``SlurmctldTimeout``), a primary that starts
takes control back from the backup, and one that gives control away (``scontrol takeover``)
exits (slurmctld's ``controller.c``: "primary controller doesn't resume backup mode"). So
the first controller that is UP, in SlurmctldHost order, is the one in control or the one
about to take it; none UP says nothing. "About to": when the primary dies, the backup
answers pings at once but takes control only ``SlurmctldTimeout`` later (seen on the test
bed: its log says "in standby mode" to job submissions meanwhile), and a primary starting
takes control back only after it answers. In those seconds the rule names the backup early,
and its daemon starts working early; nothing runs Prolog/Epilog then, and both daemons read
the same slurmdbd, so working early costs nothing but a few "already there" answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ccadapter.errors import SlurmParseError

_LINE = re.compile(r"^Slurmctld\((primary|backup\d*)\) at (\S+) is (UP|DOWN)\s*$")


@dataclass(frozen=True)
class ControllerPing:
    """One SlurmctldHost as ``scontrol ping`` reports it."""

    mode: str  # "primary", "backup", "backup2", ...
    host: str  # the SlurmctldHost name (not its address)
    up: bool


def parse_ping(text: str, version: str = "unknown") -> list[ControllerPing]:
    """Every controller line, in slurm.conf order; other lines (the banner) are skipped.
    No controller line at all is an error naming the version: the output is not ping's."""
    pings = [ControllerPing(m[1], m[2], m[3] == "UP")
             for m in (_LINE.match(line) for line in text.splitlines()) if m]
    if not pings:
        raise SlurmParseError(version, "scontrol ping",
                              f"no 'Slurmctld(...) at HOST is UP|DOWN' line in {text[:120]!r}")
    return pings


def in_control(pings: list[ControllerPing]) -> str | None:
    """The host of the controller in control: the first one UP; None when none answers."""
    return next((p.host for p in pings if p.up), None)


def same_host(a: str, b: str) -> bool:
    """Host names compared as Slurm compares SlurmctldHost with the local host: the short
    name, without case (``ctld1.example.org`` is ``CTLD1``)."""
    return a.split(".", 1)[0].lower() == b.split(".", 1)[0].lower()
