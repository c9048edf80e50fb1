"""Reconcilers: each compares one source of truth with what cc-backend knows or will know,
and puts the difference into the outbox. Each runs alone (``ccadapter sync --once --only
NAME``) and has its own interval in the daemon.

Every cycle has two phases: first read the state (Slurm, cc-backend, the outbox), then
decide what to enqueue, one transaction per batch of events. Nothing is sent from here:
delivery is the outbox's business.
"""

from __future__ import annotations

from typing import Any, Protocol


class Reconciler(Protocol):
    name: str

    def run_once(self) -> dict[str, Any]:
        """One cycle; returns a small summary for logs and ``sync --once``."""
        ...
