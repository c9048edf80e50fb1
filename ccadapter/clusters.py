"""Several clusters from one daemon: each served cluster's own sync, and the roster of them.

cc-slurm-adapter asks ``sacctmgr list clusters`` once at start and runs every poll for each
cluster with ``--cluster NAME``, one lastRun for all, and stops a poll at the first cluster
that fails (``processSlurmSacctPoll`` in its ``cmd/cc-slurm-adapter/daemon.go``). Here each
cluster is a :class:`ClusterSync` of its own -- its collector (``--clusters NAME`` on every
command), its lastRun, its reconcilers with their state in the shared outbox -- whose
routines run in a thread of their own (:mod:`ccadapter.daemon`), so a cluster whose Slurm
fails is reported and retried at its next turn while the others go on.

The :class:`Roster` is the set of served clusters: fixed for a list of names; for ``["*"]``
read again from ``sacctmgr list clusters`` (:class:`~ccadapter.slurm.clusters.ClusterList`)
every ``slurmClusterListInterval``: a cluster that appears is served from then on, one that
disappears is no longer polled (what the outbox holds of it is still delivered).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ccadapter.reconcilers import Reconciler
from ccadapter.runtime.lastrun import LastRun
from ccadapter.slurm.clusters import ClusterList
from ccadapter.slurm.collector import Collector


@dataclass
class ClusterSync:
    """One cluster's part of the daemon."""

    name: str  # as its jobs carry it, and as cc-backend knows it
    scoped: bool  # slurmClusters is set: its state, logs and routines carry its name
    collector: Collector
    last_run: LastRun
    reconcilers: dict[str, Reconciler]

    @property
    def scope(self) -> str | None:
        """Its name where names are scoped, else None (the default mode)."""
        return self.name if self.scoped else None


class Roster:
    def __init__(self, make: Callable[[str], ClusterSync], names: Iterable[str] = (),
                 listing: ClusterList | None = None) -> None:
        """``names``: the clusters served for good; ``listing``: read them from slurmdbd
        instead, at every :meth:`refresh`."""
        self.make = make
        self.listing = listing
        self.syncs: dict[str, ClusterSync] = {name: make(name) for name in names}

    @property
    def dynamic(self) -> bool:
        return self.listing is not None

    def names(self) -> list[str]:
        return list(self.syncs)

    def refresh(self) -> tuple[list[ClusterSync], list[ClusterSync]]:
        """Read the cluster list again; returns the clusters added and those removed.
        Raises what sacctmgr's failure raises: the roster then stays as it was."""
        if self.listing is None:
            return [], []
        names = self.listing.names()
        old = self.syncs
        added = [self.make(name) for name in names if name not in old]
        removed = [sync for name, sync in old.items() if name not in names]
        # a new dict, never one changed in place: other threads read the roster
        self.syncs = {name: old.get(name) or next(s for s in added if s.name == name)
                      for name in names}
        return added, removed
