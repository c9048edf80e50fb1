"""What an outbox event asks of cc-backend. One enum for the outbox, the REST and NATS
deliveries, the metrics' ``kind`` label and ``queue list --kind``; its values are what the
outbox stores (the ``kind`` column), so a StrEnum: equal to its stored string."""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    START = "start"  # a run began: POST /api/jobs/start_job/
    STOP = "stop"  # a run ended: POST /api/jobs/stop_job/
    NODESTATE = "nodestate"  # the cluster's node states: POST /api/nodestate/
    ENERGY = "energy"  # a stopped run's consumed energy, into its metaData (PATCH)
