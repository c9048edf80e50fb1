"""How many parts the fast path asks of slurmctld at once, by how fast slurmctld answers.

A slow slurmctld is a busy one: its RPCs wait for its locks while its scheduler walks a long
queue or starts a burst, and every user's ``sbatch`` and ``squeue`` waits with them. Asking
it in ``SLOTS`` parts at once then adds to what everyone waits for. So the fast path measures
what a job question costs (:attr:`RouteCosts.per_job`, seconds per ``show job`` in a single
request, smoothed over the last parts) and, while that is above ``slow`` seconds, asks one
part at a time; it goes back to every slot once slurmctld answers in under half of ``slow``
again (no flapping around the threshold). What waits meanwhile is a start's latency, never
its correctness: the poll still catches what the fast path has not asked. The change is said
in the log, once each way, and kept in a metric (``ccadapter_fast_path_paced``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ccadapter.slurm.controller import RouteCosts

log = logging.getLogger(__name__)

SLOW = 0.05  # seconds per job question: ten times what an idle slurmctld takes here


class Pace:
    def __init__(self, costs: RouteCosts, slots: int, name: str, slow: float = SLOW,
                 on_change: Callable[[bool], None] | None = None) -> None:
        self.costs, self.slots, self.name, self.slow = costs, slots, name, slow
        self.on_change = on_change
        self.paced = False

    def usable(self, free: int) -> int:
        """Of ``free`` slots, how many may ask now: all while slurmctld is fast; while it is
        slow, one, and only if no other part is being asked."""
        per_job = self.costs.per_job
        if not self.paced and per_job > self.slow:
            self._change(True, per_job)
        elif self.paced and per_job < self.slow / 2:
            self._change(False, per_job)
        if not self.paced:
            return free
        return 1 if free == self.slots else 0

    def _change(self, paced: bool, per_job: float) -> None:
        self.paced = paced
        if paced:
            log.warning("%s: slurmctld answers slowly (%.0f ms per job question, above %.0f "
                        "ms): asking one part at a time until it is faster", self.name,
                        per_job * 1000, self.slow * 1000)
        else:
            log.info("%s: slurmctld answers in %.0f ms per job question again: asking %d "
                     "parts at once", self.name, per_job * 1000, self.slots)
        if self.on_change:
            self.on_change(paced)
