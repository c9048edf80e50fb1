"""``sdiag``: how many jobs slurmctld holds, and how busy it is, from its own counters.

Why sdiag: it is answered from slurmctld's statistics (REQUEST_STATS_INFO) under no job lock,
while the only other way to count the jobs slurmctld holds is to list them all, which is what
the count is for avoiding: the fast path dumps every job (``scontrol show job``) only while
the dump is small (:class:`~ccadapter.slurm.controller.RouteCosts`). The text is the same on
every release of the test bed, 22.05 to 26.05 (``tests/fixtures/*/sdiag.txt``): ``Jobs
pending:`` and ``Jobs running:`` as of ``Job states ts:`` (slurmctld counts them about once a
minute, not at each question), ``Server thread count:`` and ``Agent queue size:`` beside.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ccadapter.errors import SlurmParseError

_FIELD = re.compile(r"^\s*(Jobs pending|Jobs running|Server thread count|Agent queue size|"
                    r"Job states ts):\s+.*?(\d+)\)?\s*$")


@dataclass(frozen=True)
class ControllerLoad:
    """What sdiag says of slurmctld's jobs and threads."""

    pending: int
    running: int
    threads: int  # RPCs being served now
    agent_queue: int  # messages slurmctld waits to send (to slurmd, slurmdbd)
    counted_at: int  # when it last counted its jobs (Unix time)

    @property
    def jobs(self) -> int:
        return self.pending + self.running


def parse_sdiag(text: str, version: str = "unknown") -> ControllerLoad:
    """sdiag's header read; an answer without the job counts is an error naming the
    version (it is not sdiag's, or a release changed it)."""
    found = {m[1]: int(m[2]) for m in map(_FIELD.match, text.splitlines()) if m}
    missing = [k for k in ("Jobs pending", "Jobs running") if k not in found]
    if missing:
        raise SlurmParseError(version, "sdiag", f"no {' or '.join(map(repr, missing))} in "
                              f"{text[:120]!r}")
    return ControllerLoad(found["Jobs pending"], found["Jobs running"],
                          found.get("Server thread count", 0),
                          found.get("Agent queue size", 0), found.get("Job states ts", 0))
