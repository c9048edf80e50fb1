"""What one reconciler cycle costs: its wall time, the daemon's own CPU time, and the Slurm
commands it ran (how many, the bytes they printed, their CPU time, the wall time spent
waiting for them: on a busy controller that is most of a slow cycle).

Why it is measured in the product and not only in a benchmark: the promise is that a cycle's
cost follows what changed, not how many jobs wait in the queue. An administrator sees it in
every cycle's log line and in the metrics (``ccadapter_reconciler_*``), on the real cluster,
and the scale benchmark reads the same figures from the daemon's log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ccadapter.slurm.runner import Tally


@dataclass(frozen=True)
class CycleCost:
    seconds: float  # wall time
    cpu: float  # the daemon's own CPU time in the cycle's thread
    slurm_commands: int
    slurm_bytes: int
    slurm_cpu: float  # CPU time of those commands (their own processes)
    slurm_seconds: float = 0.0  # wall time waiting for those commands

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 4), "cpu": round(self.cpu, 4),
                "slurm_commands": self.slurm_commands, "slurm_bytes": self.slurm_bytes,
                "slurm_cpu": round(self.slurm_cpu, 4),
                "slurm_seconds": round(self.slurm_seconds, 4)}


def costed(cycle: Callable[[], dict[str, Any]],
           tally: Callable[[], Tally] | None = None) -> Callable[[], dict[str, Any]]:
    """``cycle`` whose summary carries its cost under ``"cost"``. ``tally`` is the Slurm
    runner's per-thread account (:meth:`SlurmRunner.tally`); the cycle runs in one thread."""

    def run() -> dict[str, Any]:
        wall, cpu = time.monotonic(), time.thread_time()
        before = tally() if tally else Tally()
        summary = cycle()
        spent = (tally() if tally else Tally()).minus(before)
        cost = CycleCost(time.monotonic() - wall, time.thread_time() - cpu, spent.commands,
                         spent.bytes, spent.cpu, spent.seconds)
        return {**summary, "cost": cost.as_dict()}

    run.__name__ = getattr(cycle, "__name__", "cycle")
    return run
