"""nodestate: slurmctld's node states to cc-backend's ``/api/nodestate/``.

One ``scontrol -o show node`` per cycle (a line per node). The jobs running on each node are
counted from the outbox's open runs -- the runs cc-backend shows as running -- instead of
asking squeue, whose answer carries every queued job too. Only the newest state per cluster
is kept in the outbox; older cc-backends without the endpoint answer 404, which parks that
one event and never holds up job events.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ccadapter.model import EventKind
from ccadapter.outbox import NewEvent
from ccadapter.reconcilers import OneCluster


@dataclass(eq=False)
class NodeStates(OneCluster):
    name: ClassVar[str] = "nodestate"

    ignore: re.Pattern[str] | None
    clock: Callable[[], float]

    def run_once(self) -> dict[str, Any]:
        nodes = self.collector.nodes()
        jobs_per_host = self.outbox.open_hosts(self.cluster)
        payload = {"cluster": self.cluster, "nodes": [
            {"hostname": n.hostname, "states": list(n.states),
             "cpusAllocated": n.cpus_allocated, "memoryAllocated": n.memory_allocated,
             "gpusAllocated": n.gpus_allocated, "jobsRunning": jobs_per_host.get(n.hostname, 0)}
            for n in nodes if not (self.ignore and self.ignore.search(n.hostname))]}
        self.outbox.enqueue([NewEvent(self.cluster, 0, int(self.clock()), EventKind.NODESTATE,
                                      payload)])
        return {"nodes": len(payload["nodes"])}
