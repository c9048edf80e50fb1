"""The daemon as :func:`~ccadapter.daemon.build.build` assembles it (:class:`App`): its
clusters, hook routing, delivery and shutdown, and the routines it gives the loop."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from ccadapter.cc.client import CcClient
from ccadapter.config.keys import Config
from ccadapter.daemon.cluster_sync import ClusterSync, Roster
from ccadapter.daemon.control import Control
from ccadapter.daemon.cost import costed
from ccadapter.daemon.deliverer import Deliverer
from ccadapter.daemon.loop import Daemon
from ccadapter.daemon.recorder import MetricsEndpoint, Recorder
from ccadapter.outbox import Outbox
from ccadapter.prep.fastpath import FastPath
from ccadapter.prep.messages import DropReason, HookMessage
from ccadapter.prep.peers import PeerIdentity
from ccadapter.prep.router import HookRouter
from ccadapter.prep.server import PrepServer
from ccadapter.prep.shares import Shares
from ccadapter.prep.tally import HookTally
from ccadapter.reconcilers import Reconciler
from ccadapter.retry import RetryPolicies
from ccadapter.runtime.clock import SYSTEM, Clock
from ccadapter.runtime.stopflag import StopFlag
from ccadapter.runtime.watchdog import Liveness
from ccadapter.slurm.collector import Collector
from ccadapter.slurm.runner import SlurmRunner

if TYPE_CHECKING:  # nats-py is imported only where NATS is configured (a few MB of RSS)
    from ccadapter.notify.nats import NatsPublisher

log = logging.getLogger(__name__)

# The outbox's state key listing the clusters the daemon serves now (read by `status`).
SERVED_KEY = "clusters.served"
# The outbox's state key of the hook's counts (ccadapter.prep.tally.HookTally.snapshot).
HOOK_KEY = "hook.counts"


@dataclass
class App:
    """The daemon as :func:`~ccadapter.daemon.build.build` assembles it: clusters, hook
    routing, delivery, shutdown; the one place that wires parts living in modules of their
    own."""

    config: Config
    outbox: Outbox
    client: CcClient | None  # None: no ccRestUrl (NATS is the only path)
    deliverer: Deliverer
    roster: Roster
    intervals: dict[str, float]
    metrics: Recorder
    publisher: NatsPublisher | None = None
    notifier: Deliverer | None = None  # NATS notifications of what REST delivered
    control: Control | None = None  # slurmctldFailover: whether this daemon works
    router: HookRouter = field(default_factory=HookRouter)
    hook: HookTally = field(default_factory=HookTally)  # hook messages taken and dropped
    shares: Shares = field(default_factory=Shares)  # what hook senders may cost slurmctld
    retries: RetryPolicies = field(default_factory=RetryPolicies)
    runners: list[SlurmRunner] = field(default_factory=list)  # long-lived scontrol each
    liveness: Liveness = field(default_factory=Liveness)  # fed by commands and requests
    stop: StopFlag = field(default_factory=StopFlag)  # the daemon's stop, read by routines
    clock: Clock = SYSTEM  # what the routines are paced by

    # --- the clusters --------------------------------------------------------------------

    @property
    def syncs(self) -> list[ClusterSync]:
        """The clusters served now, in the roster's order."""
        return list(self.roster.syncs.values())

    def lanes(self) -> list[str | None]:
        """The daemon's lanes of the clusters served now (:attr:`ClusterSync.scope`)."""
        return [s.scope for s in self.syncs]

    def only(self) -> ClusterSync:
        """The one cluster of the default mode (or of a slurmClusters list of one)."""
        syncs = self.syncs
        if len(syncs) != 1:
            raise ValueError(f"this app serves {len(syncs)} clusters, not one")
        return syncs[0]

    @property
    def collector(self) -> Collector:
        return self.only().collector

    @property
    def reconcilers(self) -> dict[str, Reconciler]:
        return self.only().reconcilers

    @property
    def cluster(self) -> str:
        return self.only().name

    def refresh_clusters(self) -> tuple[list[ClusterSync], list[ClusterSync]]:
        """``["*"]``: read the cluster list again (raises when sacctmgr fails); say and
        record what changed. Returns the clusters added and removed."""
        added, removed = self.roster.refresh()
        for sync in removed:
            log.warning("cluster %s: no longer in `sacctmgr list clusters`: not polled any "
                        "more (what the outbox holds of it is still delivered)", sync.name)
            self.metrics.cluster_served(sync.name, False)
        for sync in added:
            log.info("cluster %s: served from now on (listed by `sacctmgr list clusters`)",
                     sync.name)
            self.metrics.cluster_served(sync.name, True)
        if added or removed:
            self.record_served()
        return added, removed

    def record_served(self) -> None:
        """The served clusters into the outbox's state, for ``status`` (slurmClusters)."""
        if self.config.multi_cluster():
            self.outbox.store.set_state(SERVED_KEY, json.dumps(self.roster.names()))

    # --- the daemon ----------------------------------------------------------------------

    def daemon(self) -> Daemon:
        daemon = Daemon(self.deliverer, clock=self.clock.monotonic, wait=self.clock.wait,
                        progress=self.liveness.touch, stop_flag=self.stop)
        if self.notifier is not None:
            daemon.add_deliverer(self.notifier, "nats-notify")
        if self.control is not None:  # first: a takeover's catch-up runs in the same pass
            control = self.control
            daemon.add_routine(control.run_once, self.config.slurm_poll_interval, "control")
            daemon.gate = lambda: control.active
        for sync in self.syncs:
            self.metrics.cluster_served(sync.name, True)
            self._add_routines(daemon, sync)
        if self.roster.dynamic:
            # a failed reading is tried again one poll later, not one list interval later;
            # not gated: a standby daemon knows the clusters it would serve on taking over
            daemon.add_routine(partial(self._refresh_daemon, daemon),
                               self.config.slurm_cluster_list_interval, "slurm-clusters",
                               retry=self.config.slurm_poll_interval)
        daemon.add_routine(self.compact, 3600, "compact")
        daemon.add_routine(self.record_hook, 60, "hook-counts")
        self.record_served()
        return daemon

    def record_hook(self) -> dict[str, Any]:
        """The hook's counts into the outbox's state, for ``status``."""
        counts = self.hook.snapshot()
        self.outbox.store.set_state(HOOK_KEY, json.dumps(counts))
        return counts

    def _add_routines(self, daemon: Daemon, sync: ClusterSync) -> None:
        tally = getattr(sync.collector.runner, "tally", None)
        for name, rec in sync.reconcilers.items():
            daemon.add_routine(self.metrics.observed(name, costed(rec.run_once, tally),
                                                     sync.name),
                               self.intervals[name], name, cluster=sync.scope,
                               gated=True)

    def _refresh_daemon(self, daemon: Daemon) -> dict[str, Any]:
        added, removed = self.refresh_clusters()
        for sync in removed:
            daemon.remove_cluster(sync.name)
            self.router.remove(sync.name)
        for sync in added:
            self._add_routines(daemon, sync)
            self.router.add(sync.name, self._fast_path(sync, daemon.wake_delivery))
        return {"clusters": self.roster.names(), "added": [s.name for s in added],
                "removed": [s.name for s in removed]}

    def prep(self, wake: Callable[[], None], check_control: Callable[[], None] | None = None
             ) -> tuple[PrepServer, HookRouter]:
        """The hook's listeners and the fast path of every served cluster behind them
        (started by the caller). ``check_control``: run the control routine now (a standby
        daemon got a message)."""
        for sync in self.syncs:
            self.router.add(sync.name, self._fast_path(sync, wake))
        cfg = self.config
        # the default mode's socket is the local cluster's; with slurmClusters it is
        # everyone's (messages name their cluster), beside each cluster's own
        main = None if cfg.multi_cluster() else self.cluster
        own = {spec: name for name, spec in cfg.prep_sock_cluster_listen_paths.items()}
        on_message: Callable[[HookMessage], None] = self.router.submit
        if self.control is not None:
            on_message = self._while_active(self.router.submit, check_control)
        allowed = cfg.allowed_peers()
        server = PrepServer([cfg.prep_sock_listen_path], main, on_message,
                            group=cfg.prep_sock_group, on_drop=self.hook.dropped,
                            cluster_specs=own, allowed=allowed,
                            identity=PeerIdentity(self.is_slurm_user, allowed))
        return server, self.router

    def is_slurm_user(self, uid: int) -> bool:
        """Whether a local uid is SlurmUser of a served cluster (as its config was last
        read): the user slurmctld runs the hook as."""
        return any(s.collector.slurmctld.node_boot.slurm_uid == uid for s in self.syncs)

    def _fast_path(self, sync: ClusterSync, wake: Callable[[], None]) -> FastPath:
        return FastPath(sync.collector, self.outbox, wake, shares=self.shares,
                        ignore=self.config.ignore_hosts_pattern(),
                        retry=self.retries.fast_path,
                        on_received=partial(self.hook.received, sync.name),
                        on_drop=self.hook.dropped,
                        on_unknown=partial(self.hook.unknown, sync.name),
                        on_paced=partial(self.metrics.fast_path_paced, sync.name))

    def _while_active(self, submit: Callable[[HookMessage], None],
                      check_control: Callable[[], None] | None
                      ) -> Callable[[HookMessage], None]:
        """Hook messages go to the fast path while this daemon is active. A standby daemon
        drops them: the daemon in control finds those jobs, or this one does from lastRun
        once it takes over; a message here says its slurmctld runs Prolog/Epilog, so
        control is checked at once."""
        control = self.control
        assert control is not None

        def on_message(msg: HookMessage) -> None:
            if control.active:
                submit(msg)
                return
            self.hook.dropped(DropReason.STANDBY, f"job {msg.job_id} {msg.event} (the daemon "
                              "in control finds it); checking which slurmctld is in control")
            if check_control:
                check_control()

        return on_message

    def serve_metrics(self) -> MetricsEndpoint | None:
        """``/metrics`` on ``metricsListen`` (started by the daemon only); None when off.
        Raises OSError when the address cannot be listened on."""
        address = self.config.metrics_address()
        if address is None:
            return None
        return self.metrics.serve(*address)  # None: metrics off (NoMetrics)

    def compact(self) -> dict[str, int]:
        return {"forgotten": self.outbox.compact(self.config.slurm_query_max_span)}

    def start_publishing(self, wait: float = 0.0) -> None:
        """Connect to NATS in the background; ``wait`` seconds at most for the first
        connection (one-shot commands), 0 for the daemon, which must run without NATS."""
        if self.publisher is None:
            return
        self.publisher.start()
        until = time.monotonic() + wait
        while not self.publisher.connected and time.monotonic() < until:
            time.sleep(0.05)

    def deliver_once(self) -> dict[str, Any]:
        """One-shot commands: deliver every pending event now (REST or NATS), then the NATS
        notifications it owes; the daemon retries whatever is left. Events waiting out a
        backoff are tried too: an operator ran the command now, and its exit code must
        say whether cc-backend takes events now, not whether an earlier try's backoff
        happened to be over."""
        self.start_publishing(wait=self.config.nats_publish_timeout)
        self.deliverer.queue.retry_now()
        if self.notifier is not None:
            self.notifier.queue.retry_now()
        stats = self.deliverer.run_once()
        summary: dict[str, Any] = {"delivered": stats.delivered, "retry_later": stats.retried,
                                   "rejected": stats.rejected}
        if self.notifier is not None:
            nats = self.notifier.run_once()
            summary["nats"] = {"published": nats.delivered, "retry_later": nats.retried,
                               "rejected": nats.rejected}
        return summary

    def close(self) -> None:
        self.deliverer.close()
        if self.notifier is not None:
            self.notifier.close()
        if self.publisher is not None:
            self.publisher.close()
        if self.client is not None:
            self.client.close()
        for runner in self.runners:
            runner.close()
        self.outbox.close()
