"""Several clusters from one daemon: each served cluster's own sync, and the roster of them.

cc-slurm-adapter asks ``sacctmgr list clusters`` once at start and runs every poll for each
cluster with ``--cluster NAME``, one lastRun for all, and stops a poll at the first cluster
that fails (``processSlurmSacctPoll`` in its ``cmd/cc-slurm-adapter/daemon.go``). Here each
cluster is a :class:`ClusterSync` of its own -- its collector (``--clusters NAME`` on every
command), its lastRun, its reconcilers with their state in the shared outbox -- whose
routines run in a thread of their own (:mod:`ccadapter.daemon.loop`), so a cluster whose Slurm
fails is reported and retried at its next turn while the others go on.

The :class:`Roster` is the set of served clusters: fixed for a list of names; for ``["*"]``
read again from ``sacctmgr list clusters`` (:class:`~ccadapter.slurm.clusters.ClusterList`)
every ``slurmClusterListInterval``: a cluster that appears is served from then on, one that
disappears is no longer polled (what the outbox holds of it is still delivered).

:class:`SyncParts` builds a cluster's sync from the config (the default mode's one cluster
too); :class:`EnergyProbe` asks a cluster's slurmctld whether it gathers energy in the
cluster's own lane.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ccadapter.cc.client import CcClient
from ccadapter.config.keys import Config
from ccadapter.config.rules import Target
from ccadapter.errors import CcAdapterError
from ccadapter.model import last_run_path
from ccadapter.outbox import Outbox
from ccadapter.reconcilers import Reconciler
from ccadapter.reconcilers.cc_cache import CcCache
from ccadapter.reconcilers.lost_stops import LostStops
from ccadapter.reconcilers.nodestate import NodeStates
from ccadapter.reconcilers.slurm_window import SlurmWindow, WindowSettings
from ccadapter.reconcilers.stale_jobs import StaleJobs
from ccadapter.runtime.lastrun import LastRun
from ccadapter.slurm.clusters import ClusterList
from ccadapter.slurm.collector import Collector, CollectorSettings
from ccadapter.slurm.runner import CommandRunner

log = logging.getLogger(__name__)


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


# slurm-lookback: a second window over the last hour (late slurmdbd records), read ten
# minutes of it per cycle, a cycle every 100 s: the hour about every ten minutes
LOOKBACK_SPAN, LOOKBACK_PART, LOOKBACK_INTERVAL = 3600.0, 600.0, 100.0
# lost-stops: the stops of the last two minutes, asked of cc-backend a few minutes on
LOST_STOPS_INTERVAL = 120.0

# Each cluster's lastRun, by its scope (None: the default mode's lastRunPath).
LastRuns = Callable[[str | None], LastRun]


def last_runs(config: Config) -> LastRuns:
    """Each cluster's lastRun: ``lastRunPath`` in the default mode; with slurmClusters its
    own file beside it, read from ``lastRunPath`` until it exists
    (:mod:`ccadapter.runtime.lastrun`)."""

    def of(scope: str | None) -> LastRun:
        path = last_run_path(config.last_run_path, scope)
        return LastRun(path, seed=None if scope is None else config.last_run_path)

    return of


@dataclass(frozen=True)
class SyncParts:
    """What every cluster's sync is built from: the config, and what the clusters share
    (the outbox, cc-backend's client, their lastRun files)."""

    config: Config
    outbox: Outbox
    client: CcClient | None
    last_runs: LastRuns
    node_states: Target | None  # node_state_path()
    stop: Callable[[], bool] = lambda: False  # the daemon's stop (a window cut short)
    clock: Callable[[], float] = time.time  # the wall clock every part reads

    def sync(self, name: str, scoped: bool, runner: CommandRunner,
             config_text: str = "") -> ClusterSync:
        """``name``'s collector (``--clusters NAME`` when ``scoped``), lastRun and
        reconcilers; ``config_text``: its ``scontrol show config`` if read already."""
        cfg, outbox, client = self.config, self.outbox, self.client
        collector = Collector(runner, CollectorSettings.from_config(cfg), self.clock,
                              cluster=name if scoped else None, config_text=config_text)
        last_run = self.last_runs(name if scoped else None)
        # the default mode asks at start (its one slurmctld must answer to start at all)
        probe = EnergyProbe(collector, name) if scoped else None
        window = WindowSettings(name, cfg.slurm_poll_interval, cfg.slurm_query_max_span,
                                cfg.slurm_window_overlap, cfg.ignore_hosts_pattern(),
                                energy=False if scoped else _energy_sent(collector, None),
                                scoped=scoped)
        reconcilers: dict[str, Reconciler] = {
            "slurm-window": SlurmWindow(collector, outbox, last_run, window, self.clock,
                                        energy_probe=probe, stopping=self.stop),
            "slurm-lookback": SlurmWindow(collector, outbox, last_run, window, self.clock,
                                          lookback=LOOKBACK_SPAN, lookback_part=LOOKBACK_PART,
                                          energy_probe=probe, stopping=self.stop),
            "stale-jobs": StaleJobs(collector, outbox, name),
        }
        if client is not None and cfg.cc_rest_submit_jobs:
            # cc-cache re-sends what cc-backend lost; over REST only: with NATS as the job
            # path, the stream's acknowledgement is the proof of delivery, not cc-backend's
            # job list.
            reconcilers["cc-cache"] = CcCache(collector, outbox, name, client,
                                              cfg.cc_commit_job_interval, self.clock)
            # the stops cc-backend lost in its stop/commit race, minutes after they went out
            reconcilers["lost-stops"] = LostStops(outbox, name, client,
                                                  cfg.cc_commit_job_interval, self.clock)
        if self.node_states is not None:
            reconcilers["nodestate"] = NodeStates(collector, outbox, name,
                                                  cfg.ignore_hosts_pattern(), self.clock)
        return ClusterSync(name, scoped, collector, last_run, reconcilers)


class EnergyProbe:
    """With slurmClusters: whether a cluster's consumed energy is sent, asked of its
    slurmctld in the cluster's own lane at its first window rather than at start (a hung
    slurmctld must not hold up the start of the other clusters), and asked again at each
    window until it answers; until then no run is read again for energy."""

    def __init__(self, collector: Collector, cluster: str) -> None:
        self.collector = collector
        self.cluster = cluster
        self.known: bool | None = None
        self._said = False

    def __call__(self) -> bool:
        if self.known is None:
            try:
                self.known = _energy_sent(self.collector, self.cluster)
            except CcAdapterError as exc:
                if not self._said:
                    log.warning("cluster %s: energy: cannot read slurmctld's config (%s); "
                                "asked again at the next window", self.cluster, exc)
                    self._said = True
                return False
        return self.known


def _energy_sent(collector: Collector, cluster: str | None) -> bool:
    """Whether consumed energy goes to cc-backend: slurmctld gathers it and there is a
    REST path for it (the collector keeps it only then). Said once; the line names
    ``cluster`` where slurmClusters names clusters (None: the default mode)."""
    of = "" if cluster is None else f"cluster {cluster}: "
    if not collector.energy_accounted():
        log.info("%senergy: slurmctld gathers none (AcctGatherEnergyType); no "
                 "metaData.energy", of)
        return False
    if not collector.settings.energy:
        log.info("%senergy: slurmctld gathers it, but it goes to cc-backend over REST only "
                 "and ccRestUrl is empty: no metaData.energy", of)
        return False
    log.info("%senergy: the consumed energy of each run goes into its metaData.energy "
             "(PATCH /api/jobs/edit_meta/ after the stop)", of)
    return True
